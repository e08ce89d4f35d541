"""One timer for the successive deadlines of an upstream attempt or a relayed stream.

``asyncio.timeout`` builds a timeout object, a timer handle and a task lookup for each
block: ~10 Python calls entered and left, and a stream entered two blocks per relayed
chunk (the read from the engine, the write to the client). Here each phase only moves
the deadline (``move``); one timer handle checks it when it fires, and is armed again
only when it fired before the deadline:

    dog = Watchdog(period=30.0)
    dog.start(deadline)                 # time.monotonic() seconds
    try:
        await read()
    except asyncio.CancelledError:
        if dog.expired():               # the deadline, not another cancellation
            raise TimeoutError from None
        raise
    dog.move(time.monotonic() + 30.0)   # the next phase's deadline
    ...
    dog.stop()

The timer never waits longer than ``period`` (the shortest limit the phases use), so a
phase that moves the deadline later than ``now + period`` never re-arms it; a deadline
sooner than the armed time (the request's total running out) re-arms at once. On expiry
the task is cancelled, as ``asyncio.timeout`` does; ``expired`` tells that cancellation
apart from any other (a client disconnect, a shutdown) by the task's cancel count.
"""

from __future__ import annotations

import asyncio
import math
import time

__all__ = ["Watchdog"]


class Watchdog:
    """Cancels the task that started it once ``time.monotonic()`` passes its deadline."""

    __slots__ = ("_armed", "_cancelling", "_fired", "_handle", "_loop", "_period", "_task", "at")

    def __init__(self, period: float) -> None:
        self._period = period
        self.at = math.inf  # the deadline; math.inf: none (an await no limit covers)
        self._armed = math.inf  # when the timer fires
        self._handle: asyncio.TimerHandle | None = None
        self._fired = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[object] | None = None
        self._cancelling = 0

    def start(self, at: float) -> None:
        """Watch the current task, with deadline ``at``."""
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._cancelling = task.cancelling()
        self._loop = task.get_loop()
        self.move(at)

    def move(self, at: float) -> None:
        """The deadline is now ``at`` (``math.inf``: none)."""
        self.at = at
        if at < self._armed:
            self._arm(time.monotonic())

    def expired(self) -> bool:
        """Call on ``CancelledError``: true when the cancellation is this deadline's only
        (and it is taken back); false when another is pending, or the deadline did not pass.
        After it, ``move`` watches again."""
        if not self._fired:
            return False
        self._fired = False
        assert self._task is not None
        return self._task.uncancel() <= self._cancelling

    def stop(self) -> None:
        handle = self._handle
        if handle is not None:
            handle.cancel()
            self._handle = None
        self._armed = math.inf

    def _arm(self, now: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        at = min(self.at, now + self._period)
        assert self._loop is not None
        self._armed = at
        self._handle = self._loop.call_later(at - now, self._fire)

    def _fire(self) -> None:
        self._handle = None
        self._armed = math.inf
        now = time.monotonic()
        if now < self.at:
            if self.at < math.inf:
                self._arm(now)
            return
        self._fired = True
        assert self._task is not None
        self._task.cancel()
