"""The counters the limits need, declared by their consumer: ``CounterStore``.

``fairgate.state`` implements it (``MemoryCounterStore``, ``RedisCounterStore``);
``tests/limits/test_store.py`` is the conformance suite every implementation passes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from fairgate.limits.charges import Charge, Lease, PeriodCharge, Verdict
from fairgate.limits.fairshare_state import Claim, ClaimRequest, UsageCharge

__all__ = ["CounterStore", "StateUnavailable"]


class StateUnavailable(Exception):
    """The back end could not answer in time (down, timed out, or its breaker is open).

    Raised by every ``CounterStore`` operation instead of the back end's own
    errors; whether a request is then refused or served is decided once, in
    ``fairgate.limits.limiter``.
    """


class CounterStore(Protocol):
    """Atomic counters for rate windows, calendar periods and in-flight slots.

    Time is always the caller's ``now`` (Unix seconds), so tests drive it and
    several gateways agree as far as their clocks do. Every operation either
    completes or raises ``StateUnavailable``; none blocks longer than the
    back end's configured timeout.

    Cancellation (a client that disconnects) is safe: an ``acquire`` cancelled
    mid-way leaves nothing charged once the back end has answered (what landed
    is given back), and a ``settle`` cancelled mid-way still completes.
    ``aclose`` waits for such unfinished work.
    """

    @property
    def refresh_interval(self) -> float | None:
        """Seconds between the ``refresh`` calls a live gateway must make so that its
        in-flight leases do not expire; None when leases never expire (one process)."""
        ...

    async def acquire(
        self, charges: Sequence[Charge], now: float, claim: ClaimRequest | None = None
    ) -> Verdict:
        """Check and charge every counter in one atomic step: all or none.

        Charges must name distinct counters (``ValueError`` otherwise). Two
        concurrent acquisitions, from this process or another one sharing the
        back end, never both see the same room.

        With ``claim``, the fair-share claim (``FairShareState.claim``) is made in
        the same atomic step once every counter was charged, and its outcome is
        the verdict's ``claim``; a refused acquisition claims nothing. One round
        trip in a shared back end (none for the claim when its reservation is 0).
        Cancelled mid-way, the slot is given back with the charges.
        """
        ...

    async def settle(
        self,
        lease: Lease | None,
        actual: Mapping[str, int],
        now: float,
        release: Claim | None = None,
        charge: UsageCharge | None = None,
    ) -> None:
        """Release the lease's in-flight slots and correct its estimates.

        ``actual`` maps a charge's key to the amount really used (missing keys
        keep their estimate). A period counter is corrected in the period the
        lease charged; a window refund goes back to the bucket it was charged
        in, while an excess is charged at ``now`` so that it weighs for a full
        window from the moment it is known. Settle each lease once.

        ``release`` (``FairShareState.release``) and ``charge``
        (``FairShareState.charge`` at ``now``) are done in the same round trip: a
        request's whole way out is one call, which completes even if cancelled.
        ``lease`` may be None when only those are due.
        """
        ...

    async def read(self, counters: Sequence[Charge], now: float) -> tuple[int, ...]:
        """Current usage of each counter (window weight, period total, slots held);
        the charges' amounts and limits are ignored and nothing is charged."""
        ...

    async def seed(
        self,
        counter: PeriodCharge,
        total: int,
        now: float,
        *,
        track: float = 0.0,
        uncharged: bool = False,
    ) -> None:
        """Raise a period counter to at least ``total`` (never lowers it): how spend
        recorded elsewhere is restored after a restart, idempotently.

        With ``track`` > 0 (budgets on a back end several gateways share) the back end
        also keeps ``total`` for ``track`` seconds after the seed; a seed made while it is
        kept, with ``uncharged`` (by a gateway that may have served the scope without
        charging the counter: a budget new to it while it ran), adds the growth of the
        total since the kept one, instead of raising the counter to it: spend another
        gateway served before it knew the budget is then not lost under reservations
        the counter holds but the records do not yet show."""
        ...

    async def refresh(self, now: float) -> None:
        """Extend the expiry of every in-flight lease this instance holds."""
        ...

    async def aclose(self) -> None:
        """Finish work left by cancelled callers, then release connections; the store
        is not used afterwards."""
        ...
