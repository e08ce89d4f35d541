"""Time as an injectable dependency: pure code takes ``now`` as an argument, I/O code a Clock."""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "SystemClock"]


class Clock(Protocol):
    """``wall()`` is Unix time in seconds (for calendars and records);
    ``monotonic()`` never goes backwards (for durations and deadlines)."""

    def wall(self) -> float: ...

    def monotonic(self) -> float: ...


class SystemClock:
    """The real clock."""

    def wall(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()
