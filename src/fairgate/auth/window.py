"""The sliding minute the failure limiter and the lookup ceiling count in.

The usual two-window estimate: the events of the current aligned 60 s window,
plus those of the previous window weighted by how much of it still overlaps the
last 60 s. Worked example, limit 60: 60 events at 0:50, then at 1:15 the
estimate is 60 × (45/60) = 45, so 15 more are allowed; a source that keeps
going gets about 60 a minute.
"""

from __future__ import annotations

__all__ = ["WINDOW", "SlidingCount", "window_of"]

WINDOW = 60.0


def window_of(now: float) -> int:
    """The aligned 60 s window ``now`` (monotonic seconds) falls in."""
    return int(now // WINDOW)


class SlidingCount:
    """Events in the current and the previous aligned window."""

    __slots__ = ("current", "previous", "window")

    def __init__(self, window: int) -> None:
        self.window = window
        self.previous = 0
        self.current = 0

    def roll(self, window: int) -> None:
        """Move to ``window`` (never backwards), keeping the previous one when adjacent."""
        if window <= self.window:
            return
        self.previous = self.current if window == self.window + 1 else 0
        self.current = 0
        self.window = window

    def add(self, now: float, n: int = 1) -> None:
        """Count ``n`` events at ``now``."""
        self.roll(window_of(now))
        self.current += n

    def remove(self, window: int) -> None:
        """Take back one event counted in ``window`` (if it is still counted)."""
        if window == self.window and self.current > 0:
            self.current -= 1
        elif window == self.window - 1 and self.previous > 0:
            self.previous -= 1

    def stale(self, now: float) -> bool:
        """Whether nothing counted here still weighs in the sliding minute at ``now``."""
        window = window_of(now)
        return self.window < window - 1 or (self.window == window - 1 and self.current == 0)

    def wait(self, limit: int, now: float) -> float | None:
        """Seconds until the estimate is below ``limit`` (≥ 1), or None if it is now.

        Exact for the estimate: with no more events meanwhile, the estimate is
        below the limit after that many seconds.
        """
        window = window_of(now)
        self.roll(window)
        into = now - window * WINDOW
        if self.previous * (1.0 - into / WINDOW) + self.current < limit:
            return None
        if self.current < limit:
            # The previous window's share decays below the room left in this one.
            room = (limit - self.current) / self.previous
            return max(0.0, WINDOW * (1.0 - room) - into)
        # Wait for the next window, then for this one's share to decay below the limit.
        return (WINDOW - into) + WINDOW * (1.0 - limit / self.current)
