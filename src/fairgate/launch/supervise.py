"""One engine replica's process under supervision: start, wait for health, restart, drain.

States: `starting` (spawned) → `loading` (the process lives, `/health` not yet 200) →
`ready` → `draining` (stop asked: the agent stops admitting, in-flight requests get
until the drain deadline) → `stopped`. A process that exits unasked is `failed` and is
restarted after an exponential backoff with jitter (`backoff_base` doubling up to
`backoff_cap`); after `max_restarts` failures within `crash_window` it enters
`crash_loop` and stays there, with the exit code and the output's last lines, until an
operator acts (`reset`). Each transition is reported through `on_state`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

import aiohttp

from fairgate.launch.command import Command

__all__ = ["Report", "State", "Supervisor"]

State = Literal["starting", "loading", "ready", "draining", "stopped", "failed", "crash_loop"]


@dataclass(frozen=True, slots=True)
class Report:
    state: State
    restarts: int = 0
    exit_code: int | None = None
    tail: tuple[str, ...] = ()
    """The process's last output lines (on failed and crash_loop)."""


class Supervisor:
    def __init__(
        self,
        command: Command,
        health_url: str,
        *,
        on_state: Callable[[Report], Awaitable[None] | None] = lambda report: None,
        backoff_base: float = 1.0,
        backoff_cap: float = 60.0,
        max_restarts: int = 5,
        crash_window: float = 600.0,
        health_interval: float = 0.5,
        tail_lines: int = 40,
        rng: random.Random | None = None,
    ) -> None:
        self._command = command
        self._health_url = health_url
        self._on_state = on_state
        self._base = backoff_base
        self._cap = backoff_cap
        self._max_restarts = max_restarts
        self._window = crash_window
        self._health_interval = health_interval
        self._tail: deque[str] = deque(maxlen=tail_lines)
        self._rng = rng or random.Random()
        self._failures: deque[float] = deque()
        self._proc: asyncio.subprocess.Process | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self.report = Report("stopped")
        self.restarts = 0

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    async def _set(self, state: State, *, exit_code: int | None = None) -> None:
        tail = tuple(self._tail) if state in ("failed", "crash_loop") else ()
        self.report = Report(state, self.restarts, exit_code, tail)
        result = self._on_state(self.report)
        if result is not None:
            await result

    def start(self) -> None:
        """Begin supervising (returns at once; states arrive through on_state)."""
        if self._task is None or self._task.done():
            self._stopping.clear()
            self._task = asyncio.create_task(self._run(), name="engine-supervisor")

    def backoff(self, failures: int) -> float:
        """Seconds before restart number `failures` (1-based): full jitter under the cap."""
        ceiling = min(self._cap, self._base * 2 ** (failures - 1))
        return self._rng.uniform(ceiling / 2, ceiling)

    async def _run(self) -> None:
        while not self._stopping.is_set():
            exit_code = await self._run_once()
            if self._stopping.is_set():
                break
            now = time.monotonic()
            self._failures.append(now)
            while self._failures and now - self._failures[0] > self._window:
                self._failures.popleft()
            if len(self._failures) > self._max_restarts:
                await self._set("crash_loop", exit_code=exit_code)
                return
            await self._set("failed", exit_code=exit_code)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.backoff(len(self._failures)))
            if self._stopping.is_set():
                break
            self.restarts += 1
        await self._set("stopped")

    async def _run_once(self) -> int:
        self._tail.clear()
        await self._set("starting")
        self._proc = await asyncio.create_subprocess_exec(
            *self._command.argv,
            env={**os.environ, **self._command.env},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        await self._set("loading")
        reader = asyncio.create_task(self._read_output(self._proc))
        health = asyncio.create_task(self._wait_healthy())
        try:
            code = await self._proc.wait()
            return code
        finally:
            health.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await health
            await reader

    async def _read_output(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            self._tail.append(raw.decode(errors="replace").rstrip())

    async def _wait_healthy(self) -> None:
        timeout = aiohttp.ClientTimeout(total=2)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with session.get(self._health_url) as answer:
                        if answer.status == 200:
                            await self._set("ready")
                            return
                await asyncio.sleep(self._health_interval)

    async def stop(self, *, drain: float = 30.0, in_flight: Callable[[], int] = lambda: 0) -> None:
        """Drain, then stop: wait while `in_flight()` is above 0 for up to `drain` seconds,
        SIGTERM the process group, SIGKILL it after 10 s more. Returns when it is gone."""
        self._stopping.set()
        proc = self._proc
        if proc is not None and proc.returncode is None:
            await self._set("draining")
            deadline = time.monotonic() + drain
            while in_flight() > 0 and time.monotonic() < deadline:  # noqa: ASYNC110 - a count to poll, no event
                await asyncio.sleep(0.1)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
        if self._task is not None:
            await self._task

    def reset(self) -> None:
        """An operator's restart after crash_loop: forget the failures and start again."""
        self._failures.clear()
        self.restarts = 0
        self.start()
