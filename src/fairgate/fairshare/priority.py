"""The priority number one request carries to the engine (vLLM: lower runs first).

    within share (fewer within-share requests in flight than the reservation):
        priority = class                              0 interactive, 1 batch
    borrowing inside its organisation (a team past its sub-reservation, on
    seats of its organisation's reservation no sibling holds; ``teams.py``):
        priority = 2 + class                          2, 3
    borrowing:
        priority = 10 + 10 · rank + class             rank 0..9  →  10..101

Invariant: every within-share priority (0 or 1) is smaller than every
within-organisation one (2 or 3), which is smaller than every borrowing priority
(10 or more). vLLM admits its waiting heap in (priority, arrival) order
and, when KV blocks run out, preempts the running request with the largest
(priority, arrival); so a within-share request is admitted before any borrower
and is never the victim while a borrower runs. Among borrowers the most
under-served organisation (rank 0) goes first and is preempted last.

The test counts *within-share* requests, not all requests in flight: an
organisation whose clients keep more than its reservation in flight would
otherwise never drop below it again, and everything it sent would borrow.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from fairgate.fairshare.tree import MAX_RANK

__all__ = [
    "BORROW_BASE",
    "IN_ORG_BASE",
    "RANK_STEP",
    "Decision",
    "PriorityClass",
    "borrowing_priority",
    "decide",
    "decide_in_org",
]

BORROW_BASE = 10
"""The smallest borrowing priority (rank 0, interactive)."""
IN_ORG_BASE = 2
"""The priority of a team borrowing its organisation's unused seats (plus the class)."""
RANK_STEP = 10
"""Distance between two consecutive ranks, so a class never crosses into the next rank."""


class PriorityClass(enum.IntEnum):
    """The model's class from the configuration: ``interactive`` runs before ``batch``."""

    INTERACTIVE = 0
    BATCH = 1


# built on every request: slotted, not frozen (docs/architecture.md, "Value types")
@dataclass(slots=True)
class Decision:
    """The fair-share verdict for one request.

    ``priority`` is the engine priority (0..101, lower first). ``within_share``
    says the request counts against its organisation's reservation until it
    finishes (the caller increments the within-share in-flight count); ``rank``
    is the borrower's rank, ``None`` within share. ``in_org`` marks a team
    borrowing its organisation's unused reservation (within share for the pool,
    at priority 2/3).
    """

    org: str
    priority: int
    within_share: bool
    rank: int | None
    in_org: bool = False


def borrowing_priority(rank: int, cls: PriorityClass) -> int:
    """``10 + 10 · rank + class``; raises ``ValueError`` for a rank outside 0..9."""
    if not 0 <= rank <= MAX_RANK:
        raise ValueError(f"rank must be in 0..{MAX_RANK}, got {rank}")
    return BORROW_BASE + RANK_STEP * rank + int(cls)


def decide(
    org: str, within_share_in_flight: int, reservation: int, rank: int, cls: PriorityClass
) -> Decision:
    """Within share while ``within_share_in_flight < reservation``, else borrow at ``rank``.

    Raises ``ValueError`` for a negative count or reservation, or a rank outside 0..9.
    """
    if within_share_in_flight < 0 or reservation < 0:
        raise ValueError("in-flight counts and reservations are never negative")
    if not 0 <= rank <= MAX_RANK:
        raise ValueError(f"rank must be in 0..{MAX_RANK}, got {rank}")
    if within_share_in_flight < reservation:
        return Decision(org, int(cls), True, None)
    return Decision(org, borrowing_priority(rank, cls), False, rank)


def decide_in_org(org: str, cls: PriorityClass) -> Decision:
    """A team past its sub-reservation on a seat of its organisation's reservation:
    ``2 + class``, within share for the pool (it holds a slot of the reservation)."""
    return Decision(org, IN_ORG_BASE + int(cls), True, None, in_org=True)
