"""Failed authentications counted in the state back end, so a fleet shares one count.

Each listener's ``FailureLimiter`` counts in its own process: with N gateways a
spraying network would fail N times as often before every one refuses it. With
Redis, each failure is also charged to a sliding minute in the state back end
(one counter per network and aggregate, the limiter's levels and limits, under
``authfail:<listener>:``); once one of them is full, the gateway that sees the
next failure refuses it (429) and holds the network over its limits locally
until the window says it may try again, without asking Redis again.

    shared = SharedFailures(state, "client", limiter, clock)
    wait = await shared.failed(addr)     # None, or seconds: over the fleet's limit

A back end that does not answer counts nothing (the process's own limiter
still does): failed authentications never fail closed on a valid key.
"""

from __future__ import annotations

import logging

from fairgate.auth.failures import FailureLimiter
from fairgate.core.clock import Clock
from fairgate.limits import CounterStore, StateUnavailable, WindowCharge

__all__ = ["SharedFailures"]

log = logging.getLogger("fairgate.auth")

_WINDOW = 60.0


class SharedFailures:
    """The fleet-wide count of failed authentications of one listener (see the module doc)."""

    def __init__(
        self, state: CounterStore, listener: str, limiter: FailureLimiter, clock: Clock
    ) -> None:
        self._state = state
        self._prefix = f"authfail:{listener}:"
        self._limiter = limiter
        self._clock = clock

    async def failed(self, addr: str) -> float | None:
        """Count one failure of ``addr``'s network and aggregates across the fleet: the
        seconds to wait when one of them was already at its limit (nothing counted then),
        else None (also when the back end does not answer)."""
        charges = [
            WindowCharge(f"{self._prefix}{key}", 1, limit, _WINDOW)
            for key, limit in self._limiter.levels(addr)
        ]
        if not charges:
            return None
        try:
            verdict = await self._state.acquire(charges, self._clock.wall())
        except StateUnavailable as exc:
            log.warning("failed authentication not counted across gateways: %s", exc)
            return None
        if verdict.lease is not None:
            return None
        return verdict.retry_after or _WINDOW
