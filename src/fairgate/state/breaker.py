"""A small circuit breaker, so that a down back end costs a fast failure, not a timeout
per request.

    closed ──(threshold consecutive failures)──▶ open ──(cooldown)──▶ one trial call
       ▲                                          ▲                     │
       └────────────────── success ───────────────┴───── failure ◀──────┘

While open, ``allow()`` answers False except for one trial call per ``cooldown``;
the trial's success closes the breaker, its failure (or silence) keeps it open for
another cooldown. Time is the monotonic clock.
"""

from __future__ import annotations

from typing import Literal

from fairgate.core.clock import Clock, SystemClock

__all__ = ["Breaker"]


class Breaker:
    """Consecutive-failure breaker: ``threshold`` (>= 1) failures in a row open it for
    ``cooldown`` seconds (> 0). Not thread-safe; one per event loop."""

    def __init__(
        self, *, threshold: int = 3, cooldown: float = 1.0, clock: Clock | None = None
    ) -> None:
        if threshold < 1 or cooldown <= 0:
            raise ValueError("breaker threshold must be >= 1 and cooldown > 0")
        self.threshold = threshold
        self.cooldown = cooldown
        self._clock = clock or SystemClock()
        self._failures = 0
        self._next_trial: float | None = None  # None while closed

    @property
    def state(self) -> Literal["closed", "open"]:
        return "closed" if self._next_trial is None else "open"

    def allow(self) -> bool:
        """Whether a call may go to the back end now (always, while closed)."""
        if self._next_trial is None:
            return True
        now = self._clock.monotonic()
        if now < self._next_trial:
            return False
        self._next_trial = now + self.cooldown  # this caller is the trial
        return True

    def success(self) -> None:
        self._failures = 0
        self._next_trial = None

    def failure(self) -> None:
        self._failures += 1
        if self._next_trial is None and self._failures >= self.threshold:
            self._next_trial = self._clock.monotonic() + self.cooldown
