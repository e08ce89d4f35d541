"""What one request holds between the limit and admit stages and the settle stage."""

from __future__ import annotations

from dataclasses import dataclass

from fairgate.admission.lease import Lease
from fairgate.limits.demand import Admission
from fairgate.limits.fairshare_state import Claim, UsageCharge
from fairgate.proxy.dispatch import Grant

__all__ = ["Due", "Ticket"]


# built on every request: slotted, not frozen (docs/architecture.md, "Value types")
@dataclass(slots=True)
class Due:
    """What the admit stage owes the fair-share state on the way out: the slot to
    release (``claim``; None for a borrower) and the usage to charge (None: nothing
    cost). ``seat`` is ``(pool, org, team)`` to announce to the dispatcher once the
    slot is released (None: no seat to announce).

    The limit stage pays it in its own settle call (one round trip for the whole way
    out) and leaves ``paid()`` on the ticket: the seat, and in ``answered`` whether
    that call reached the state (None: not known yet, or not paid by that call), so
    that the admit stage sees a way-out failure as it sees one on the way in. What
    the limit stage leaves, the admit stage pays.
    """

    claim: Claim | None
    charge: UsageCharge | None
    seat: tuple[str, str, str] | None = None
    answered: bool | None = None

    def paid(self, answered: bool | None = None) -> Due:
        """What is left once the slot was released and the usage charged: the seat, and
        whether the call that paid reached the state."""
        return Due(None, None, self.seat, answered)


@dataclass(slots=True)
class Ticket:
    """What one request holds from the limit stage to its settle: filled by
    ``Limit.enter`` and ``Admit.enter``, given back by their ``leave``."""

    limits: Admission | None = None
    pool: str | None = None
    org: str = ""
    team: str | None = None  # charged with the organisation when fair share applies
    claim: Claim | None = None
    lease: Lease | None = None
    priority: int | None = None
    borrowing: bool = False
    rank: int | None = None  # the borrower's Fair Tree rank when it was decided
    head_key: str | None = None  # counted in the head check's in-flight (``Limit.leave`` uncounts)
    grant: Grant | None = None  # a borrower let go by the dispatcher, pending until dispatched
    held: float = 0.0  # seconds the gateway held it before it was dispatched
    ahead: bool = False  # the fair-share claim rode with the limits (``limits.claim``)
    due: Due | None = None  # owed to the fair-share state on the way out
    retries: list[Admission] | None = None  # budgets charged again for retries (``Limit.retry``)

    @property
    def within_share(self) -> bool | None:
        """How fair share admitted the request: True within its organisation's
        reservation, False borrowing, None outside fair share (no pool)."""
        return None if self.pool is None else not self.borrowing

    def dispatched(self) -> None:
        """The request is now counted in a replica's in-flight: no longer pending."""
        if self.lease is not None:
            self.lease.dispatched()
        if self.grant is not None:
            self.grant.dispatched()
