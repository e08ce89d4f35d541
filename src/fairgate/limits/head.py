"""The head gate: refusals this process can prove from a request's head, before its body.

A request's body (up to ``limits.max_body_bytes``) is read and parsed before the
limiter's atomic check, because the check needs the model and the estimate. A key
that is already at its limit would make the gateway spend that memory only to
refuse it. The head gate answers, from dictionaries this process keeps, the two
questions that need only the key:

- **in flight**: the key holds ``max_in_flight`` admitted requests *in this
  process*. Every one of them holds a slot in the shared count too, so the
  shared count is at its limit as well and the full check would refuse.
- **recently refused**: the full check refused the key's requests per minute or
  per day with a Retry-After, and that time has not passed. Both count requests
  of weight 1 that are never corrected downwards, so the window cannot free up
  sooner; a refusal is only reused while the key's limit is not above the one
  that refused (an operator who raises it is obeyed at once).

So the head gate refuses only what the full check would refuse, with the same
code and message. The exceptions, all narrow: a charge given back on the back end
between the two (a request whose admission was cancelled mid-way, a lease lost
on Redis); the head gate then refuses for at most the rest of the Retry-After, or
until one of this process's own requests ends. Tokens per minute and budgets are
not checked from the head: whether a request fits them depends on its estimate.
The full check still runs after the body for every request the head gate lets
through.

Cost: two dictionary lookups per request, no I/O; memory: one entry per key with
a request in flight or a refusal not yet expired (expired refusals are dropped
as they are met, and in batches once ``max_refusals`` is reached).

    head = HeadGate()
    head.check(key_id, rpm, rpd, max_in_flight, now)  # RateLimited, or nothing
    head.entered(key_id)                              # admitted with a slot
    head.left(key_id)                                 # before the slot is given back
    head.refused(key_id, error, rpm, rpd, now)        # the full check said no
"""

from __future__ import annotations

from dataclasses import dataclass

from fairgate.core.errors import RateLimited
from fairgate.limits.charges import IN_FLIGHT_RETRY_AFTER
from fairgate.limits.plan import in_flight_refusal

__all__ = ["HEAD_CODES", "HeadGate"]

HEAD_CODES = frozenset({"rpm_limit_exceeded", "rpd_limit_exceeded"})
"""The refusals of the full check that the head gate remembers."""

# A Retry-After from the back end may be rounded up (Redis answers in whole
# milliseconds): a remembered refusal ends this much earlier, never later.
_MARGIN = 0.002


@dataclass(frozen=True, slots=True)
class _Refusal:
    until: float  # wall-clock seconds
    limit: int  # the limit that refused
    rpd: bool  # which limit: per day (True) or per minute
    error: RateLimited


class HeadGate:
    """Per-process in-flight counts and remembered refusals, keyed by key id.

    Not shared between processes and not persistent: each process refuses from
    what it saw itself. ``now`` is the limiter's clock (wall seconds).
    """

    def __init__(self, max_refusals: int = 100_000) -> None:
        self._in_flight: dict[str, int] = {}
        self._refusals: dict[str, _Refusal] = {}
        self._max_refusals = max_refusals

    def check(
        self,
        key: str,
        rpm: int | None,
        rpd: int | None,
        max_in_flight: int | None,
        now: float,
    ) -> None:
        """Raise the ``RateLimited`` the full check would raise, when this process knows it."""
        if max_in_flight is not None and self._in_flight.get(key, 0) >= max_in_flight:
            raise in_flight_refusal(max_in_flight)(IN_FLIGHT_RETRY_AFTER)
        refusal = self._refusals.get(key)
        if refusal is None:
            return
        if now >= refusal.until:
            del self._refusals[key]
            return
        limit = rpd if refusal.rpd else rpm
        if limit is not None and limit <= refusal.limit:
            error = refusal.error
            raise RateLimited(error.message, code=error.code, retry_after=refusal.until - now)

    def entered(self, key: str) -> None:
        """Count one admitted request of ``key`` holding an in-flight slot."""
        self._in_flight[key] = self._in_flight.get(key, 0) + 1

    def left(self, key: str) -> None:
        """Uncount it: call before the slot is given back, so this count never
        exceeds the shared one."""
        count = self._in_flight.get(key, 0) - 1
        if count > 0:
            self._in_flight[key] = count
        else:
            self._in_flight.pop(key, None)

    def refused(
        self, key: str, error: RateLimited, rpm: int | None, rpd: int | None, now: float
    ) -> None:
        """Remember the full check's refusal of ``key`` when it is one the head may reuse."""
        if error.code not in HEAD_CODES or error.retry_after is None:
            return
        per_day = error.code == "rpd_limit_exceeded"
        limit = rpd if per_day else rpm
        if limit is None or error.retry_after <= _MARGIN:
            return
        if len(self._refusals) >= self._max_refusals and key not in self._refusals:
            self._purge(now)
            if len(self._refusals) >= self._max_refusals:
                return  # full of live refusals: the full check still refuses
        self._refusals[key] = _Refusal(now + error.retry_after - _MARGIN, limit, per_day, error)

    def in_flight(self, key: str) -> int:
        """Requests of ``key`` admitted by this process and not yet left."""
        return self._in_flight.get(key, 0)

    def _purge(self, now: float) -> None:
        for key in [k for k, r in self._refusals.items() if now >= r.until]:
            del self._refusals[key]
