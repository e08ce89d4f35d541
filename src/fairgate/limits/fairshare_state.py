"""The state the fair-share decision needs, declared by its consumer: ``FairShareState``.

Two things per pool and organisation live in the state back end, so that
several gateways share one reservation and one ranking:

    within-share in flight   the organisation's requests admitted within its
                             reservation and not yet finished (slots with a lease)
    decayed usage            (value, at): cost consumed, charged when a request
                             finishes, decayed as value · exp(−ln 2 · dt / half_life)

A request makes one atomic ``claim`` at dispatch: it takes a within-share slot
if fewer than ``reservation`` are held (priority 0/1), else it borrows and
nothing is counted. Whatever happens next, ``release`` gives the slot back and
``charge`` adds what the request really cost. Only within-share requests are
counted: counting borrowers too would let an organisation's own borrowed
requests push its next request out of its reservation.

With team sub-shares (``fairgate.fairshare.teams``) the claim is team-aware:
it names the requester's group (a team with a share, or the rest) and that
group's sub-reservation, and in the same atomic step takes a slot of the
group's sub-reservation, else one of the organisation's unused seats (a slot
counted against the organisation's reservation: its groups' slots plus what
its teams borrowed inside it), else nothing. The slot is released the same way.
Usage is charged to the team as well as to the organisation, in the same step.

``fairgate.state`` implements it (``MemoryCounterStore``, ``RedisCounterStore``);
``tests/state/test_fairshare_state.py`` is the conformance suite both pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Claim", "ClaimRequest", "FairShareState", "Split", "UsageCharge", "lease_team"]


@dataclass(frozen=True, slots=True)
class Split:
    """The requester's place in an organisation with team sub-shares, for a team-aware claim.

    ``group`` is the team with a share the request belongs to, or ``REST`` (``""``)
    for a team without one; ``reservation`` is that group's sub-reservation;
    ``groups`` every team of the organisation with a share (the rest is implied),
    whose slots count against the organisation's reservation.
    """

    group: str
    reservation: int
    groups: tuple[str, ...]


def lease_team(lease: str) -> str | None:
    """The team a within-share lease was claimed for (``"<id>/<team>"``), None if unnamed."""
    _, slash, team = lease.partition("/")
    return team if slash else None


# built on every request: slotted, not frozen (docs/architecture.md, "Value types")
@dataclass(slots=True)
class Claim:
    """The outcome of one ``claim``: within share (holding ``lease``) or borrowing.

    ``in_flight`` is how many within-share requests of ``org`` were in flight in
    ``pool`` just before this claim: pass it to ``FairShare.decide`` as
    ``within_share_in_flight`` and the decision agrees with ``within_share``.
    ``lease`` is None exactly when ``within_share`` is False (nothing to release).

    A team-aware claim (with a ``Split``) sets ``group``; ``in_org`` says its
    slot is one of the organisation's unused seats, not the group's own
    (priority 2/3); ``in_flight`` is then the group's own slots before the claim
    when it took one of those, else the organisation's total.
    """

    pool: str
    org: str
    within_share: bool
    in_flight: int
    lease: str | None
    claimed_at: float
    group: str | None = None
    in_org: bool = False


# built on every request: slotted, not frozen (docs/architecture.md, "Value types")
@dataclass(slots=True)
class ClaimRequest:
    """A ``claim`` to make in the same atomic step as a limits acquisition
    (``CounterStore.acquire(..., claim=...)``): the arguments of ``claim`` but ``now``."""

    pool: str
    org: str
    reservation: int
    split: Split | None = None
    team: str | None = None


# built on every request: slotted, not frozen (docs/architecture.md, "Value types")
@dataclass(slots=True)
class UsageCharge:
    """A ``charge`` to make in the same round trip as a settle
    (``CounterStore.settle(..., charge=...)``): the arguments of ``charge`` but ``now``."""

    pool: str
    org: str
    cost_units: float
    half_life: float
    team: str | None = None


class FairShareState(Protocol):
    """Within-share in-flight slots and decayed usage per pool and organisation.

    Time is the caller's ``now`` (Unix seconds). Every operation completes or
    raises ``StateUnavailable``, never blocking past the back end's timeout;
    the caller decides what a request gets then (a borrowing priority is the
    safe answer: it never takes a reservation it cannot prove).

    Slots are leases: in a shared back end they expire ``lease_ttl`` after the
    holder's last ``refresh`` (the ``LeaseRefresher`` of ``CounterStore`` also
    refreshes them), so a gateway that dies frees its slots by itself.
    Cancellation is safe: a ``claim`` cancelled mid-way leaves no slot held
    once the back end has answered, and a ``release`` cancelled mid-way still
    completes.

    Usage values are floats in cost units (e.g. GPU-hours), never negative. They
    are a ranking signal, not money: float rounding is accepted, spend is
    accounted elsewhere in integer micro-units.
    """

    async def claim(
        self,
        pool: str,
        org: str,
        reservation: int,
        now: float,
        split: Split | None = None,
        team: str | None = None,
    ) -> Claim:
        """Take one within-share slot of ``org`` in ``pool`` if fewer than ``reservation``
        (>= 0) are held, in one atomic step; otherwise take nothing (borrowing).

        Concurrent claims, from this process or another gateway on the same back
        end, never hold more than ``reservation`` slots together. A reservation
        of 0 always borrows and costs no round trip.

        With ``split``: a slot of the group's sub-reservation if fewer than
        ``split.reservation`` are held, else (``in_org``) one of the organisation's
        seats if its groups and in-org borrowers hold fewer than ``reservation``
        together, else nothing; still one atomic step and one round trip.
        Concurrent claims never hold more than a group's sub-reservation of its
        own slots, nor take an in-org seat past ``reservation``. ``team`` is
        written into the lease (``lease_team``) for ``team_in_flight``.
        """
        ...

    async def release(self, claim: Claim) -> None:
        """Give the claim's slot back (nothing for a borrowing claim). Idempotent:
        releasing twice, or after the lease expired, frees nothing else."""
        ...

    async def in_flight(
        self, pool: str, now: float, groups: Mapping[str, Sequence[str]] | None = None
    ) -> dict[str, int]:
        """Within-share slots held in ``pool`` per organisation, by every gateway on the
        back end: live leases only (unexpired at ``now``), organisations holding none left out.
        ``groups`` names, per organisation with team shares, its teams with a share:
        their slots and the in-org seats count too.

        A read for monitoring (``GET /admin/fairshare``, metrics), never for a
        decision: ``claim`` alone counts atomically. In Redis one round trip,
        O(organisations that claimed in the pool recently).
        """
        ...

    async def team_in_flight(
        self, pool: str, now: float, groups: Mapping[str, Sequence[str]] | None = None
    ) -> dict[str, dict[str, int]]:
        """Slots of each organisation's reservation held per team (own and in-org), from
        the team written in each live lease; unnamed leases are left out. A read for
        monitoring, like ``in_flight``; one round trip in Redis."""
        ...

    async def team_usage(
        self, pool: str, now: float, half_life: float
    ) -> dict[str, dict[str, float]]:
        """Decayed usage per organisation and team in ``pool`` (org → team → usage), all
        at ``now``; one round trip in Redis, like ``usage``."""
        ...

    async def usage(self, pool: str, now: float, half_life: float) -> dict[str, float]:
        """Decayed usage of every organisation with usage in ``pool``, all at ``now``.

        ``half_life`` in seconds (> 0). One read of the pool's records, O(orgs of
        the pool); in Redis one round trip per call, so a caller deciding many
        requests a second should cache the answer for about a second (a ranking
        a second old is as good as a fresh one at a half-life of days).
        """
        ...

    async def charge(
        self,
        pool: str,
        org: str,
        cost_units: float,
        now: float,
        half_life: float,
        team: str | None = None,
    ) -> None:
        """Decay ``org``'s usage in ``pool`` to ``now`` and add ``cost_units`` (finite,
        >= 0; ``ValueError`` otherwise), atomically; with ``team``, the team's usage
        too, in the same step. A ``now`` earlier than the stored time (gateway
        clocks slightly apart) is read as the stored time."""
        ...
