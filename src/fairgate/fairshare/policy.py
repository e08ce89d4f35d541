"""The fair-share policy of a gateway: reservations per pool, and a priority per request.

Pure and stateless after construction: the caller (the admission stage, over
the state back end) hands in the organisation's within-share in-flight count
and the pool's decayed usage per organisation, and keeps them up to date
itself. The policy holds only configuration: capacities, shares, half-life,
and the reservations computed from them once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from fairgate.fairshare.apportion import apportion
from fairgate.fairshare.decay import DEFAULT_HALF_LIFE, DecayedUsage
from fairgate.fairshare.priority import Decision, PriorityClass, decide
from fairgate.fairshare.tree import dense_ranks, level_fairshare

__all__ = ["FairShare", "Standing"]


@dataclass(frozen=True, slots=True)
class Standing:
    """One organisation's fair-share state in one pool, for ``GET /admin/fairshare`` and metrics.

    ``level`` is LF = S / U (``math.inf`` without usage); ``rank`` is what a
    borrowing request of this organisation would get now (0..9).
    """

    org: str
    share: float
    reservation: int
    usage: float
    level: float
    rank: int


class FairShare:
    """Reservation with borrowing over several pools.

    ``capacities`` maps each pool to C, the concurrency it sustains without
    preemption; ``shares`` maps each pool to its organisations' shares (each in
    [0, 1], summing to at most 1; a pool without an entry reserves nothing).
    ``half_life`` is in seconds. Raises ``ValueError`` on an invalid
    configuration, ``KeyError`` when asked about a pool it does not know.
    An organisation without a share in a pool has a reservation of 0 and
    always borrows there.
    """

    def __init__(
        self,
        capacities: Mapping[str, int],
        shares: Mapping[str, Mapping[str, float]],
        half_life: float = DEFAULT_HALF_LIFE,
    ) -> None:
        unknown = sorted(set(shares) - set(capacities))
        if unknown:
            raise ValueError(f"shares given for unknown pools: {', '.join(unknown)}")
        if not half_life > 0:
            raise ValueError(f"half_life must be positive, got {half_life!r}")
        self.half_life = float(half_life)
        self._capacity = dict(capacities)
        self._shares = {pool: MappingProxyType(dict(shares.get(pool, {}))) for pool in capacities}
        self._reservations = {
            pool: MappingProxyType(apportion(capacity, self._shares[pool]))
            for pool, capacity in capacities.items()
        }

    @property
    def pools(self) -> tuple[str, ...]:
        return tuple(self._capacity)

    def capacity(self, pool: str) -> int:
        return self._capacity[pool]

    def shares(self, pool: str) -> Mapping[str, float]:
        return self._shares[pool]

    def reservations(self, pool: str) -> Mapping[str, int]:
        """Reservation per organisation in ``pool`` (Hamilton apportionment, read-only)."""
        return self._reservations[pool]

    def decide(
        self,
        pool: str,
        org: str,
        cls: PriorityClass,
        within_share_in_flight: int,
        usage_by_org: Mapping[str, float],
    ) -> Decision:
        """The priority of one new request of ``org`` in ``pool``.

        ``within_share_in_flight`` is how many of the organisation's requests
        that were admitted within share are still in flight in this pool;
        ``usage_by_org`` is the pool's decayed usage per organisation, all
        taken at the same instant. O(organisations of the pool).
        """
        reservation = self._reservations[pool].get(org, 0)
        if within_share_in_flight < reservation:
            return decide(org, within_share_in_flight, reservation, 0, cls)
        return decide(
            org, within_share_in_flight, reservation, self._rank(pool, org, usage_by_org), cls
        )

    def standings(self, pool: str, usage_by_org: Mapping[str, float]) -> dict[str, Standing]:
        """Share, reservation, usage, LF and rank of every organisation of ``pool``."""
        shares = self._shares[pool]
        levels = level_fairshare(shares, usage_by_org)
        ranks = dense_ranks(levels)
        return {
            org: Standing(
                org=org,
                share=shares.get(org, 0.0),
                reservation=self._reservations[pool].get(org, 0),
                usage=usage_by_org.get(org, 0.0),
                level=levels[org],
                rank=ranks[org],
            )
            for org in levels
        }

    def usage(self, value: float = 0.0, at: float = 0.0) -> DecayedUsage:
        """A usage record with this policy's half-life, e.g. rebuilt from a stored (value, at)."""
        return DecayedUsage(value, at, self.half_life)

    def _rank(self, pool: str, org: str, usage_by_org: Mapping[str, float]) -> int:
        usage = usage_by_org if org in usage_by_org else {**usage_by_org, org: 0.0}
        return dense_ranks(level_fairshare(self._shares[pool], usage))[org]

    def __repr__(self) -> str:
        pools = ", ".join(f"{p}={c}" for p, c in self._capacity.items())
        return f"FairShare({pools}, half_life={self.half_life:g}s)"
