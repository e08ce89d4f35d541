"""One engine replica's process under supervision: start, wait for health, restart, drain.

States: `starting` (spawned) → `loading` (the process lives, `/health` not yet 200) →
`ready` → `draining` (stop asked: the agent stops admitting, in-flight requests get
until the drain deadline) → `stopped`. `ready` needs both: `/health` answers 200 and the
port it asks is listened on by the engine's own process or one of its children. Any
process on the node can bind a port the engine has not bound yet (a model loads for
minutes first) or has left; without the second check such a process answering `/health`
would be reported ready, and the gateway would send it the tenants' prompts and the
engine's key. A process that exits unasked is `failed` and is
restarted after an exponential backoff with jitter (`backoff_base` doubling up to
`backoff_cap`); after `max_restarts` failures within `crash_window` it enters
`crash_loop` and stays there, with the exit code and the output's last lines, until an
operator acts (`reset`). Each transition is reported through `on_state`.

The engine runs in a session (and process group) of its own and writes its output to
a file (`log_path`, the previous run's kept as `NAME.1`), never to a pipe: it does not
depend on the supervising process, so it keeps serving when the agent exits or is
killed. A later agent can `adopt` it — supervise the running process it did not
spawn. An adopted process is not this process's child: when it exits its exit code
cannot be known (`Report.exit_code` is None), and the next launch is a child again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import subprocess
import tempfile
import time
import urllib.parse
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import aiohttp
import psutil

from fairgate.launch.command import Command

log = logging.getLogger(__name__)

__all__ = ["Report", "State", "Supervisor", "listens", "read_tail"]

State = Literal["starting", "loading", "ready", "draining", "stopped", "failed", "crash_loop"]


@dataclass(frozen=True, slots=True)
class Report:
    state: State
    restarts: int = 0
    exit_code: int | None = None
    """None while running, and when the process was adopted (its exit code is unknowable)."""
    tail: tuple[str, ...] = ()
    """The process's last output lines (on failed and crash_loop)."""
    adopted: bool = False


def read_tail(path: Path, lines: int) -> tuple[str, ...]:
    """The last `lines` lines of a log file (empty if it does not exist)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read()
    except OSError:
        return ()
    text = data.decode(errors="replace").splitlines()
    return tuple(line.rstrip() for line in text[-lines:])


class Supervisor:
    def __init__(
        self,
        command: Command,
        health_url: str,
        *,
        on_state: Callable[[Report], Awaitable[None] | None] = lambda report: None,
        log_path: Path | None = None,
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
        self._port = urllib.parse.urlsplit(health_url).port or 80
        self._on_state = on_state
        if log_path is None:
            log_path = Path(tempfile.mkdtemp(prefix="fairgate-engine-")) / "engine.log"
        self.log_path = log_path
        self._base = backoff_base
        self._cap = backoff_cap
        self._max_restarts = max_restarts
        self._window = crash_window
        self._health_interval = health_interval
        self._tail_lines = tail_lines
        self._rng = rng or random.Random()
        self._failures: deque[float] = deque()
        self._process: psutil.Process | None = None
        self._child: subprocess.Popen[bytes] | None = None
        self._adopt: psutil.Process | None = None
        self._adopt_healthy = False
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self.report = Report("stopped")
        self.restarts = 0

    @property
    def command(self) -> Command:
        return self._command

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def started_at(self) -> float | None:
        """The process's creation time (what tells it from a later process with its pid)."""
        return self._process.create_time() if self._process is not None else None

    @property
    def adopted(self) -> bool:
        return self._child is None and self._process is not None

    async def _set(self, state: State, *, exit_code: int | None = None) -> None:
        tail = (
            read_tail(self.log_path, self._tail_lines) if state in ("failed", "crash_loop") else ()
        )
        self.report = Report(state, self.restarts, exit_code, tail, self.adopted)
        result = self._on_state(self.report)
        if result is not None:
            await result

    def start(self) -> None:
        """Begin supervising (returns at once; states arrive through on_state)."""
        if self._task is None or self._task.done():
            self._stopping.clear()
            self._task = asyncio.create_task(self._run(), name="engine-supervisor")

    def adopt(self, process: psutil.Process, *, restarts: int = 0, healthy: bool = False) -> None:
        """Supervise `process`, an engine an earlier agent launched with this command,
        instead of launching one; restarts (if it exits) launch the command as usual.
        `healthy`: its /health answered just now, so it is `ready` at once."""
        self._adopt = process
        self._adopt_healthy = healthy
        self.restarts = restarts
        self._process = process
        self.report = Report("ready" if healthy else "loading", restarts, adopted=True)
        self.start()

    async def healthy(self, process: psutil.Process) -> bool:
        """Whether /health answers 200 now, from `process` (or a child of it) listening
        on the health port."""
        return await self._answers() and listens(process, self._port)

    async def _answers(self) -> bool:
        """Whether /health answers 200 now, whoever answers."""
        timeout = aiohttp.ClientTimeout(total=2)
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.get(self._health_url) as answer,
            ):
                return answer.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    def hold_crash_loop(self, report: Report) -> None:
        """Be in crash_loop without running anything: an earlier agent's replica gave up,
        and that stands until an operator acts (`reset`)."""
        self.restarts = report.restarts
        self.report = Report("crash_loop", report.restarts, report.exit_code, report.tail)

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
            self._child = None
            self._process = None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.backoff(len(self._failures)))
            if self._stopping.is_set():
                break
            self.restarts += 1
        await self._set("stopped")

    async def _run_once(self) -> int | None:
        adopt, self._adopt = self._adopt, None
        if adopt is not None:
            self._child = None
            self._process = adopt
            await self._set("ready" if self._adopt_healthy else "loading")
        else:
            await self._set("starting")
            self._spawn_log()
            # Popen, not asyncio's subprocess: asyncio kills a child whose transport is
            # collected, and the engine must outlive this process.
            with self.log_path.open("ab") as log:
                self._child = subprocess.Popen(  # noqa: ASYNC220, S603 - a fork, no wait; the profile's checked argv
                    self._command.argv,
                    env={**os.environ, **self._command.env},
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            try:
                self._process = psutil.Process(self._child.pid)
            except psutil.NoSuchProcess:
                self._process = None
            await self._set("loading")
        if self.report.state == "ready":
            health = asyncio.create_task(asyncio.sleep(0))
        else:
            health = asyncio.create_task(self._wait_healthy())
        try:
            return await self._wait_exit()
        finally:
            health.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await health

    def _spawn_log(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.log_path.replace(self.log_path.with_name(self.log_path.name + ".1"))

    async def _wait_exit(self) -> int | None:
        """The exit code of our child, or None once an adopted process is gone."""
        child = self._child
        if child is not None:
            while (code := child.poll()) is None:  # noqa: ASYNC110 - a process to poll, no event
                await asyncio.sleep(self._health_interval)
            return code
        process = self._process
        while process is not None and _alive(process):  # noqa: ASYNC110 - not our child: poll it
            await asyncio.sleep(self._health_interval)
        return None

    async def _wait_healthy(self) -> None:
        warned = False
        while True:
            process = self._process
            if process is not None and await self._answers():
                if listens(process, self._port):
                    await self._set("ready")
                    return
                if not warned:
                    warned = True
                    log.warning(
                        "%s answers, but no process of the engine (pid %d) listens on "
                        "port %d: not ready while another process holds it",
                        self._health_url,
                        process.pid,
                        self._port,
                    )
            await asyncio.sleep(self._health_interval)

    async def stop(
        self,
        *,
        drain: float = 30.0,
        in_flight: Callable[[], int | Awaitable[int]] = lambda: 0,
    ) -> None:
        """Drain, then stop: wait while `in_flight()` is above 0 for up to `drain` seconds,
        SIGTERM the process group, SIGKILL it after 10 s more. Returns when it is gone."""
        self._stopping.set()
        process = self._process
        if process is not None and _alive(process):
            await self._set("draining")
            deadline = time.monotonic() + drain

            async def busy() -> bool:
                count = in_flight()
                if not isinstance(count, int):
                    count = await count
                return count > 0

            while time.monotonic() < deadline and _alive(process) and await busy():  # noqa: ASYNC110 - a count to poll, no event
                await asyncio.sleep(0.1)
            _signal_group(process.pid, signal.SIGTERM)
            if not await self._gone(process, 10):
                _signal_group(process.pid, signal.SIGKILL)
                await self._gone(process, 10)
        if self._task is not None:
            await self._task
        elif self.report.state == "crash_loop":
            await self._set("stopped")

    async def _gone(self, process: psutil.Process, seconds: float) -> bool:
        child = self._child if self._child is not None and self._child.pid == process.pid else None
        deadline = time.monotonic() + seconds
        while (child.poll() is None) if child is not None else _alive(process):
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.1)
        return True

    def reset(self) -> None:
        """An operator's restart after crash_loop: forget the failures and start again."""
        self._failures.clear()
        self.restarts = 0
        self.start()


def listens(process: psutil.Process, port: int) -> bool:
    """Whether `process` or one of its descendants has a TCP socket listening on `port`
    (vLLM's API server may be a child of the process launched)."""
    try:
        family = [process, *process.children(recursive=True)]
    except psutil.Error:
        return False
    for member in family:
        try:
            sockets = member.net_connections(kind="tcp")
        except psutil.Error:
            continue
        for sock in sockets:
            if sock.status == psutil.CONN_LISTEN and sock.laddr and sock.laddr.port == port:
                return True
    return False


def _alive(process: psutil.Process) -> bool:
    """Running, the same process (not a later one with its pid), and not a zombie."""
    try:
        return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
