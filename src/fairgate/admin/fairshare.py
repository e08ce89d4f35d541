"""``GET /admin/fairshare``: reservation, in flight, usage, LF and rank per pool and organisation.

(No ``from __future__ import annotations``: FastAPI reads these annotations at run time.)

    monitor = FairShareMonitor(policy, state, clock, local=gate.fairshare_counts,
                               learned=pool_capacity.learned)   # pools of capacity: auto
    body = await monitor.report()                  # every pool and organisation
    app.include_router(fairshare_router(monitor, tenancy))

Where each number comes from:

    capacity, share, reservation          the policy (the configuration, C learned from
                                          the engines: ``capacity_source`` "auto", or the
                                          seats of the replicas the fleet has routed:
                                          "replicas", the pools named in ``placed``)
    capacity_learned                      the pool's learner (``capacity: auto`` only): floor,
                                          ceiling, each replica's value, why and when C last
                                          moved (``changed_at`` in Unix seconds, ``null`` if
                                          it never has)
    within_share_in_flight                the state back end: every gateway sharing it
    usage, level, rank                    the back end's decayed usage, ranked by the policy
    borrowing_in_flight, gateways         every gateway's own counts summed (``fleet``:
                                          ``fairgate.state.board``): borrowing requests hold
                                          nothing in the back end, so each gateway publishes
                                          its own every second; ``gateways`` is how many counted
    this_gateway.*                        this process's own counters (``local``)

``level`` is LF = S / U; an organisation without usage has LF = +inf, which
JSON cannot carry: it is ``null`` there (every such organisation has rank 0).
``rank`` is what a borrowing request of the organisation would
get now, the rank ``FairShare.decide`` computes.

Each organisation row has ``teams``: one row per team with a sub-share, or with
usage or a slot in flight (``team``, ``share`` (None: no share of its own, it
shares the rest), ``reservation`` (its sub-reservation; the rest's for a team
without a share), ``within_share_in_flight`` (slots of the organisation's
reservation it holds: its own and the organisation's idle seats it borrowed),
``usage``, ``level`` (its group's LF among the organisation's groups) and
``rank`` (that group's rank within the organisation)).
"""

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

from fastapi import APIRouter

from fairgate.admin.endpoints.context import Caller
from fairgate.core.clock import Clock
from fairgate.core.errors import Forbidden, NotFound, ServiceUnavailable
from fairgate.fairshare import FairShare, Standing
from fairgate.fairshare.learned_capacity import Learned
from fairgate.fairshare.policy import TeamUsage
from fairgate.limits import FairShareState, StateUnavailable
from fairgate.tenancy import Actor, Tenancy

__all__ = ["FairShareMonitor", "LocalInFlight", "fairshare_router", "visible_orgs"]

log = logging.getLogger("fairgate.admin")

LocalInFlight = Callable[[], Mapping[tuple[str, str], tuple[int, int]]]
"""This gateway's requests in flight per (pool, org): (within share, borrowing)."""

FleetInFlight = Callable[[], Awaitable[Mapping[tuple[str, str], tuple[int, int]]]]
"""Every gateway's requests in flight per (pool, org), summed: (within share, borrowing)."""

LearnedCapacity = Callable[[str], Learned | None]
"""What a pool's capacity learner knows now (``None`` for a pool of fixed capacity)."""


class FairShareMonitor:
    """Reads the fair-share state of every pool for the admin API and the metrics.

    ``local()`` gives this process's in-flight requests per (pool, org) as
    (within share, borrowing). ``report`` reads the back end twice per pool
    (in-flight slots and usage, all pools concurrently) and raises
    ``StateUnavailable`` when it cannot.
    """

    def __init__(
        self,
        policy: FairShare,
        state: FairShareState,
        clock: Clock,
        local: LocalInFlight,
        *,
        learned: LearnedCapacity | None = None,
        placed: Collection[str] = (),
        fleet: FleetInFlight | None = None,
        gateways: Callable[[], int] = lambda: 1,
    ) -> None:
        self._policy = policy
        self._state = state
        self._clock = clock
        self._local = local
        self._learned = learned or (lambda _pool: None)
        self._placed = frozenset(placed)
        self._fleet = fleet
        self._gateways = gateways

    @property
    def pools(self) -> tuple[str, ...]:
        return self._policy.pools

    async def report(
        self, *, orgs: Collection[str] | None = None, pool: str | None = None
    ) -> dict[str, Any]:
        """The JSON body of ``GET /admin/fairshare``, at the clock's current time.

        ``orgs`` None: a row for every organisation with a share, usage, or a
        request in flight in the pool; otherwise exactly one row per pool for
        each of ``orgs``. ``pool`` limits the report to that pool (``KeyError``
        if the policy does not know it).
        """
        if pool is not None and pool not in self._policy.pools:
            raise KeyError(pool)
        pools = self._policy.pools if pool is None else (pool,)
        now = self._clock.wall()
        local = dict(self._local())
        fleet = dict(await self._fleet()) if self._fleet is not None else local
        reads = await asyncio.gather(*(self._read(p, now) for p in pools), return_exceptions=True)
        failed = next((r for r in reads if isinstance(r, BaseException)), None)
        if failed is not None:
            raise failed
        body: list[dict[str, Any]] = []
        for name, read in zip(pools, reads, strict=True):
            assert not isinstance(read, BaseException)
            held, usage, team_held, team_usage = read
            rows = self._rows(name, held, usage, local, fleet, orgs)
            for row in rows:
                row["teams"] = self._team_rows(
                    name, row["org"], team_held.get(row["org"], {}), team_usage.get(row["org"], {})
                )
            body.append(
                {
                    "pool": name,
                    "capacity": self._policy.capacity(name),
                    **self._capacity_source(name, now),
                    "orgs": rows,
                }
            )
        return {
            "object": "fairshare",
            "at": now,
            "half_life_seconds": self._policy.half_life,
            "gateways": self._gateways(),
            "pools": body,
        }

    def _capacity_source(self, pool: str, now: float) -> dict[str, Any]:
        learned = self._learned(pool)
        if learned is None:
            return {"capacity_source": "replicas" if pool in self._placed else "config"}
        changed = learned.changed_at
        return {
            "capacity_source": "auto",
            "capacity_learned": {
                "floor": learned.floor,
                "ceiling": learned.ceiling,
                "replicas": dict(learned.replicas),
                "reason": learned.reason,
                # the learner's clock is monotonic; the report's is the wall clock
                "changed_at": None
                if changed is None
                else now - (self._clock.monotonic() - changed),
            },
        }

    async def _read(
        self, pool: str, now: float
    ) -> tuple[dict[str, int], dict[str, float], dict[str, dict[str, int]], TeamUsage]:
        groups = {
            org: tuple(self._policy.team_shares(org))
            for org in self._policy.shares(pool)
            if self._policy.team_shares(org)
        }
        held = await self._state.in_flight(pool, now, groups)
        usage = await self._state.usage(pool, now, self._policy.half_life)
        team_held = await self._state.team_in_flight(pool, now, groups)
        team_usage = await self._state.team_usage(pool, now, self._policy.half_life)
        return held, usage, team_held, team_usage

    def _team_rows(
        self, pool: str, org: str, held: Mapping[str, int], usage: Mapping[str, float]
    ) -> list[dict[str, Any]]:
        standings = self._policy.team_standings(pool, org, {**dict.fromkeys(held, 0.0), **usage})
        rows = [
            {
                "team": s.team,
                "share": s.share,
                "reservation": s.reservation,
                "within_share_in_flight": held.get(s.team, 0),
                "usage": s.usage,
                "level": None if math.isinf(s.level) else s.level,
                "rank": s.rank,
            }
            for s in standings.values()
        ]
        rows.sort(key=lambda row: (row["rank"], row["team"]))
        return rows

    def _rows(
        self,
        pool: str,
        held: Mapping[str, int],
        usage: Mapping[str, float],
        local: Mapping[tuple[str, str], tuple[int, int]],
        fleet: Mapping[tuple[str, str], tuple[int, int]],
        orgs: Collection[str] | None,
    ) -> list[dict[str, Any]]:
        standings = self._policy.standings(pool, usage)
        if orgs is None:
            here = {o for (p, o), counts in fleet.items() if p == pool and any(counts)}
            names = set(standings) | set(held) | here
        else:
            names = set(orgs)
        rows = [
            _row(
                self._standing(pool, org, standings, usage),
                held,
                local.get((pool, org)),
                fleet.get((pool, org), (0, 0))[1],
            )
            for org in names
        ]
        rows.sort(key=lambda row: (row["rank"], row["org"]))
        return rows

    def _standing(
        self, pool: str, org: str, standings: Mapping[str, Standing], usage: Mapping[str, float]
    ) -> Standing:
        """``org``'s standing, ranked as ``decide`` ranks it: among the others plus itself."""
        found = standings.get(org)
        if found is not None:
            return found
        return self._policy.standings(pool, {**usage, org: 0.0})[org]


def _row(
    standing: Standing,
    held: Mapping[str, int],
    local: tuple[int, int] | None,
    borrowing: int,
) -> dict[str, Any]:
    within_here, borrowing_here = local or (0, 0)
    here = within_here + borrowing_here
    within = held.get(standing.org, 0)
    return {
        "org": standing.org,
        "share": standing.share,
        "reservation": standing.reservation,
        "within_share_in_flight": within,
        "borrowing_in_flight": borrowing,
        "borrowed_fraction": borrowing / (within + borrowing) if within + borrowing else None,
        "usage": standing.usage,
        "level": None if math.isinf(standing.level) else standing.level,
        "rank": standing.rank,
        "this_gateway": {
            "within_share_in_flight": within_here,
            "borrowing_in_flight": borrowing_here,
            "borrowed_fraction": borrowing_here / here if here else None,
        },
    }


_DESCRIPTION = """\
Per pool: `capacity` (C) and `capacity_source` (`config`; `replicas`: the
seats of the `deploy:` replicas routed now, part of the configured capacity
each; or `auto`: learned from the engines, with `capacity_learned`: `floor`,
`ceiling`, each replica's learned value, the `reason` C last moved and when,
`changed_at`), and per organisation its `share`, `reservation`,
`within_share_in_flight` (requests holding a reserved slot, counted by every
gateway sharing the state back end), decayed `usage` (cost units), `level`
(LF = S / U; `null` means +infinity: no usage), and `rank` (what a borrowing
request of the organisation gets now; 0 is served first). `teams` lists the
organisation's teams with a sub-share, usage or a slot in flight: `team`,
`share` (`null`: none of its own, it shares the rest), `reservation`,
`within_share_in_flight` (slots of the organisation's reservation it holds),
`usage`, `level` and `rank` among the organisation's teams.
`borrowing_in_flight` counts the organisation's borrowing requests on every
gateway (each publishes its own counts every second; `gateways` says how many
were counted, a gateway silent for 3 s is not), `borrowed_fraction` =
borrowing / (within share + borrowing) across the fleet (`null` when none is in
flight). `this_gateway` holds this gateway's own requests in flight within
share and borrowing, and its `borrowed_fraction`. Proxy admins and viewers see
every organisation with a share, usage or a request in flight; organisation
admins and viewers see one row per pool for each of their organisations; other
roles are refused (403).
503 `state_unavailable` when the state back end does not answer.
"""


async def visible_orgs(tenancy: Tenancy, actor: Actor) -> Collection[str] | None:
    """The organisations whose rows ``actor`` reads (None: all of them); raises Forbidden
    for an actor who reads no organisation (the rule of ``GET /admin/fairshare``)."""
    if actor.root_reader:
        return None
    if not actor.read_orgs:
        raise Forbidden(
            "fair-share standings are for proxy and organisation admins and viewers",
            code="forbidden",
        )
    return {org.name for org in await tenancy.orgs.list(actor) if org.id in actor.read_orgs}


def fairshare_router(monitor: FairShareMonitor, tenancy: Tenancy) -> APIRouter:
    router = APIRouter(prefix="/admin", tags=["fairshare"])

    @router.get("/fairshare", summary="Fair-share standings", description=_DESCRIPTION)
    async def fairshare(actor: Caller, pool: str | None = None) -> dict[str, Any]:
        orgs = await visible_orgs(tenancy, actor)
        if pool is not None and pool not in monitor.pools:
            raise NotFound(f"no pool {pool!r}", code="pool_not_found")
        try:
            return await monitor.report(orgs=orgs, pool=pool)
        except StateUnavailable as exc:
            log.error("admin API: fair-share state: %s", exc)
            raise ServiceUnavailable(
                "the fair-share state is unavailable; try again", code="state_unavailable"
            ) from None

    return router
