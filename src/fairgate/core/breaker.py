"""The one circuit breaker: per replica in front of the engines, and in front of Redis.

    closed ──(``failures`` consecutive failures)──▶ open (backoff b = backoff_initial)
    open ──(b elapsed, next allow())──▶ half_open: exactly one probe request admitted
    half_open ──probe succeeds──▶ closed, b reset to backoff_initial
    half_open ──probe fails────▶ open, b = min(2·b, backoff_max)

With ``failures=3, backoff_initial=1, backoff_max=60`` a dead replica is
probed after 1 s, 2 s, 4 s, … and then once a minute. ``failures=1`` gives a
plain cool-down after every failure.

The proxy reports each request it sent: ``success()`` for an answer from the
engine, ``failure()`` for a connection error, a timeout or a 5xx, and
``abandon()`` when the outcome is unknown (the client left first), which
frees the half-open probe slot without judging the replica. A failure that may
be the request's own doing (the engine *answered* a 500: a prompt or parameter
that trips an engine bug fails on every replica alike) names its ``caller``
(the key), and while closed a caller counts once in a run of failures: its
further failures neither count nor end the run. So one caller's poison requests
never open a replica's breaker for everyone else, while a replica that fails
the requests of ``failures`` different callers in a row still opens. A probe that is
never reported is given up after ``probe_timeout`` seconds, so a lost report
cannot keep a replica out of service. Health checks and metric scrapes never
touch the breaker: a replica whose ``/metrics`` fails may be serving fine.

The state back end's breaker (``Breaker.fixed``) is the same machine with a
cooldown that never grows: ``threshold`` failures in a row open it for
``cooldown`` seconds, then one trial call per cooldown; the trial's success
closes it, its failure or its silence keeps it open for another cooldown. A down
Redis costs a fast failure per request, not a timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

__all__ = ["Breaker", "BreakerState"]

BreakerState = Literal["closed", "open", "half_open"]


class Breaker:
    """Consecutive-failure breaker with exponential backoff and single half-open probes.

    Times are seconds on ``clock`` (monotonic by default). ``failures`` ≥ 1;
    0 < ``backoff_initial`` ≤ ``backoff_max``. Not thread-safe; used from one
    event loop.
    """

    @classmethod
    def fixed(
        cls,
        threshold: int = 3,
        cooldown: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> Breaker:
        """``threshold`` (≥ 1) consecutive failures open it for ``cooldown`` seconds (> 0),
        then one trial per ``cooldown`` (a trial that never reports is given up after it)."""
        if cooldown <= 0:
            raise ValueError("breaker cooldown must be > 0")
        return cls(threshold, cooldown, cooldown, clock, probe_timeout=cooldown)

    def __init__(
        self,
        failures: int = 3,
        backoff_initial: float = 1.0,
        backoff_max: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        *,
        probe_timeout: float = 120.0,
    ) -> None:
        if failures < 1:
            raise ValueError("failures must be at least 1")
        if not 0 < backoff_initial <= backoff_max:
            raise ValueError("need 0 < backoff_initial <= backoff_max")
        if probe_timeout <= 0:
            raise ValueError("probe_timeout must be positive")
        self._threshold = failures
        self._initial = backoff_initial
        self._max = backoff_max
        self._probe_timeout = probe_timeout
        self._clock = clock
        self._state: BreakerState = "closed"
        self._consecutive = 0
        self._backoff = backoff_initial
        self._opened_at = 0.0
        self._probe_since: float | None = None
        self._callers: set[str] = set()  # callers whose failure the current run counts

    @property
    def state(self) -> BreakerState:
        return self._state

    @property
    def backoff(self) -> float:
        """The wait, in seconds, before the next probe while open."""
        return self._backoff

    @property
    def consecutive_failures(self) -> int:
        return self._consecutive

    def blocked(self) -> bool:
        """True when ``allow()`` would refuse now; never changes state."""
        now = self._clock()
        if self._state == "closed":
            return False
        if self._state == "open":
            return now - self._opened_at < self._backoff
        return not self._probe_free(now)

    def allow(self) -> bool:
        """May a request be sent now? Admitting the half-open probe takes its slot."""
        now = self._clock()
        if self._state == "closed":
            return True
        if self._state == "open":
            if now - self._opened_at < self._backoff:
                return False
            self._state = "half_open"
        if not self._probe_free(now):
            return False
        self._probe_since = now
        return True

    def success(self) -> None:
        """The engine answered: close and forget past failures and backoff."""
        self._state = "closed"
        self._consecutive = 0
        self._backoff = self._initial
        self._probe_since = None
        self._callers.clear()

    def failure(self, caller: str | None = None) -> None:
        """The engine failed a request: count it, open or re-open as the diagram says.

        ``caller`` (a key id) for a failure that may be the request's own doing: while
        closed, a caller whose failure the run already counts changes nothing."""
        if self._state == "half_open":
            self._open(min(self._backoff * 2, self._max))
            return
        if self._state == "open":
            return  # a late report from before the breaker opened changes nothing
        if caller is not None:
            if caller in self._callers:
                return
            self._callers.add(caller)
        self._consecutive += 1
        if self._consecutive >= self._threshold:
            self._open(self._initial)

    def abandon(self) -> None:
        """The outcome of an admitted request is unknown: free the probe slot."""
        self._probe_since = None

    def _open(self, backoff: float) -> None:
        self._state = "open"
        self._backoff = backoff
        self._opened_at = self._clock()
        self._probe_since = None
        self._callers.clear()

    def _probe_free(self, now: float) -> bool:
        return self._probe_since is None or now - self._probe_since >= self._probe_timeout
