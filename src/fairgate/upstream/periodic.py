"""A background loop owned by the gateway: run a step, sleep, repeat, until stopped."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

__all__ = ["PeriodicTask"]

_log = logging.getLogger(__name__)


class PeriodicTask:
    """Runs ``step`` every ``interval`` seconds (measured from the end of the last step).

    A step that raises is logged and the loop goes on: a background loop that
    dies silently would freeze the state it maintains. ``start()`` needs a
    running event loop and is idempotent; ``stop()`` cancels and waits.
    """

    def __init__(self, name: str, interval: float, step: Callable[[], Awaitable[None]]) -> None:
        if interval <= 0:
            raise ValueError(f"{name}: interval must be positive")
        self._name = name
        self._interval = interval
        self._step = step
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        if not self.running:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self._name)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # stop() itself was cancelled

    async def _run(self) -> None:
        while True:
            try:
                await self._step()
            except Exception:
                _log.exception("%s: step failed", self._name)
            await asyncio.sleep(self._interval)
