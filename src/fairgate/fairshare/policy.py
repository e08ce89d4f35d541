"""The fair-share policy of a gateway: reservations per pool, and a priority per request.

Pure: the caller (the admission stage, over the state back end) hands in the
organisation's within-share in-flight count and the pool's decayed usage per
organisation, and keeps them up to date itself. The policy holds configuration
(shares, half-life) and each pool's current capacity with the reservations
computed from it; ``set_capacity`` replaces a pool's capacity (one learned from
the engines) and recomputes its reservations at once, so the request path only
ever reads a ready mapping.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from fairgate.fairshare.apportion import apportion
from fairgate.fairshare.decay import DEFAULT_HALF_LIFE, DecayedUsage
from fairgate.fairshare.priority import Decision, PriorityClass, decide, decide_in_org
from fairgate.fairshare.teams import REST, fair_tree_ranks, group_levels, split
from fairgate.fairshare.tree import MAX_RANK, dense_ranks, level_fairshare

__all__ = ["FairShare", "Standing", "TeamStanding"]

TeamUsage = Mapping[str, Mapping[str, float]]
"""Decayed usage per organisation and team: org → team → usage."""


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


@dataclass(frozen=True, slots=True)
class TeamStanding:
    """One team's standing inside its organisation in one pool.

    ``share`` is the team's fraction of its organisation's share (None: the team
    has none and shares the rest); ``reservation`` its sub-reservation (for a
    team without a share, the rest's, shared with the others); ``level`` the LF
    of its group among the organisation's groups and ``rank`` that group's dense
    rank there (0..9).
    """

    team: str
    share: float | None
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

    ``team_shares`` maps an organisation to its teams' shares (fractions of the
    organisation's, summing to at most 1; ``fairgate.fairshare.teams``), the
    same in every pool. Without any, every decision is the one-level one.
    """

    def __init__(
        self,
        capacities: Mapping[str, int],
        shares: Mapping[str, Mapping[str, float]],
        half_life: float = DEFAULT_HALF_LIFE,
        team_shares: Mapping[str, Mapping[str, float]] | None = None,
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
        self._team_shares = {
            org: MappingProxyType(dict(teams))
            for org, teams in (team_shares or {}).items()
            if teams
        }
        self._splits = {
            (pool, org): MappingProxyType(split(reservations.get(org, 0), teams))
            for pool, reservations in self._reservations.items()
            for org, teams in self._team_shares.items()
        }

    def set_capacity(self, pool: str, capacity: int) -> bool:
        """Make ``capacity`` the C of ``pool`` and apportion its reservations (and their team
        splits) again; True when C changed. Requests already holding a within-share slot
        keep it: an organisation over a shrunk reservation borrows until enough finish.
        Raises ``KeyError`` for an unknown pool, ``ValueError`` for a negative capacity."""
        if capacity == self._capacity[pool]:
            return False
        reservations = MappingProxyType(apportion(capacity, self._shares[pool]))
        self._capacity[pool], self._reservations[pool] = capacity, reservations
        for org, teams in self._team_shares.items():
            self._splits[pool, org] = MappingProxyType(split(reservations.get(org, 0), teams))
        return True

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

    def team_shares(self, org: str) -> Mapping[str, float]:
        """The shares of ``org``'s teams that have one (empty: no team shares)."""
        return self._team_shares.get(org, MappingProxyType({}))

    @property
    def has_team_shares(self) -> bool:
        return bool(self._team_shares)

    def group(self, org: str, team: str | None) -> str | None:
        """The group a request of ``team`` claims in: the team when it has a share, else
        ``REST``; None when ``org`` has no team shares (the organisation is one group)."""
        teams = self._team_shares.get(org)
        if teams is None:
            return None
        return team if team is not None and team in teams else REST

    def team_reservations(self, pool: str, org: str) -> Mapping[str, int]:
        """``org``'s reservation in ``pool`` split over its teams with a share and ``REST``;
        empty when it has no team shares."""
        return self._splits.get((pool, org), MappingProxyType({}))

    def within(self, org: str, cls: PriorityClass, *, in_org: bool = False) -> Decision:
        """The decision for a claim that took a slot: within its (sub-)reservation (0/1),
        or, ``in_org``, a team on its organisation's unused seats (2/3)."""
        return decide_in_org(org, cls) if in_org else decide(org, 0, 1, 0, cls)

    def borrow(
        self,
        pool: str,
        org: str,
        cls: PriorityClass,
        usage_by_org: Mapping[str, float],
        *,
        team: str | None = None,
        usage_by_team: TeamUsage | None = None,
    ) -> Decision:
        """A pool borrower of ``org`` (and ``team``): ``10 + 10 · rank + class``, ranked
        level by level (``rank``)."""
        rank = self.rank(pool, org, usage_by_org, team=team, usage_by_team=usage_by_team)
        reservation = self._reservations[pool].get(org, 0)
        return decide(org, reservation, reservation, rank, cls)

    def rank(
        self,
        pool: str,
        org: str,
        usage_by_org: Mapping[str, float],
        *,
        team: str | None = None,
        usage_by_team: TeamUsage | None = None,
    ) -> int:
        """The Fair Tree rank a borrower of ``org``'s ``team`` gets now: organisations by
        their LF, then inside an organisation with team shares its groups by theirs."""
        if not self._team_shares:
            return self._rank(pool, org, usage_by_org)
        usage = usage_by_org if org in usage_by_org else {**usage_by_org, org: 0.0}
        org_levels = level_fairshare(self._shares[pool], usage)
        group = self.group(org, team)
        by_team = usage_by_team or {}
        groups = {
            o: group_levels(teams, by_team.get(o, {}), also=group if o == org else None)
            for o, teams in self._team_shares.items()
            if o in org_levels
        }
        return fair_tree_ranks(org_levels, groups)[(org, group)]

    def team_standings(
        self, pool: str, org: str, usage_by_team: Mapping[str, float]
    ) -> dict[str, TeamStanding]:
        """Every team of ``org`` with a share or with usage in ``usage_by_team`` (this
        organisation's, per team): share, sub-reservation, usage, LF and rank in the org."""
        teams: Mapping[str, float] = self._team_shares.get(org, {})
        seats = self.team_reservations(pool, org)
        names = dict.fromkeys([*teams, *(t for t in usage_by_team if t)])
        also = REST if any(t not in teams for t in names) else None
        levels = group_levels(teams, usage_by_team, also=also)
        ranks = dense_ranks(levels)
        result: dict[str, TeamStanding] = {}
        for team in names:
            group = team if team in teams else REST
            result[team] = TeamStanding(
                team=team,
                share=teams.get(team),
                reservation=seats.get(group, self._reservations[pool].get(org, 0)),
                usage=usage_by_team.get(team, 0.0),
                level=levels[group],
                rank=ranks[group],
            )
        return result

    def decision(
        self,
        pool: str,
        org: str,
        cls: PriorityClass,
        *,
        within_share: bool | None,
        in_org: bool = False,
        usage_by_org: Mapping[str, float] | None = None,
        team: str | None = None,
        usage_by_team: TeamUsage | None = None,
    ) -> Decision:
        """The priority of a request of ``org`` (and ``team``) in ``pool`` once its claim
        on the shared state is known: ``within_share`` True when it took a slot of the
        (sub-)reservation (``in_org``: of its organisation's unused seats), False when it
        borrows (ranked by ``usage_by_org`` and ``usage_by_team``, read for a borrower
        only), None when the state could not be asked: no reservation can be proven, so
        it borrows at the lowest rank, never ahead of a borrower the state could rank."""
        if within_share is None:
            reservation = self._reservations[pool].get(org, 0)
            return decide(org, reservation, reservation, MAX_RANK, cls)
        if within_share:
            return self.within(org, cls, in_org=in_org)
        return self.borrow(
            pool, org, cls, usage_by_org or {}, team=team, usage_by_team=usage_by_team
        )

    def within_reservation(self, pool: str, org: str, within_share_in_flight: int) -> bool:
        """True while ``org`` holds fewer within-share requests in ``pool`` than its
        reservation: a new one is within share and its decision needs no usage."""
        return within_share_in_flight < self._reservations[pool].get(org, 0)

    def ranks(
        self,
        pool: str,
        owners: Collection[tuple[str, str]],
        usage_by_org: Mapping[str, float],
        *,
        usage_by_team: TeamUsage | None = None,
    ) -> dict[tuple[str, str], int]:
        """The Fair Tree rank of each owner, ``(organisation, team)``, in ``pool`` (every
        owner's organisation in ``usage_by_org``); teams rank inside an organisation with
        team sub-shares, the others take their organisation's rank."""
        if not self._team_shares:
            ranks = dense_ranks(level_fairshare(self._shares[pool], usage_by_org))
            return {owner: ranks[owner[0]] for owner in owners}
        by_team = usage_by_team or {}
        return {
            (org, team): self.rank(
                pool, org, usage_by_org, team=team or None, usage_by_team=by_team
            )
            for org, team in owners
        }

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
