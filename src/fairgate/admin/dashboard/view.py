"""What the dashboard shows, per pool: one view model assembled from what the gateway knows.

    board = Board(pools={"b300": ("llama-70b",)}, monitor=monitor, admission=controllers,
                  registry=registry, decisions=ring, history=history, clock=clock)
    view = await board.view(orgs=None)          # None: every organisation; else these only

Where each number comes from:

    orgs: share, reservation, within share    ``FairShareMonitor.report`` (the state back end)
    orgs: borrowed                            this gateway's borrowers (only it knows them)
    orgs: running, chart                      ``ShareHistory``: (within + borrowed) / C
    saturation, bands' queue depth            the pool's ``AdmissionController`` (absent
                                              without admission bands)
    replicas                                  the registry's replicas: health, breaker state,
                                              KV use, running and waiting from the engine
    decisions                                 ``DecisionRing``: the pool's models' last ones

Organisation rows are filtered by ``orgs`` exactly as ``GET /admin/fairshare``
filters them; the pool-wide numbers (saturation, queues, replicas, routing)
carry no organisation's data and are shown to every dashboard reader.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from fairgate.admin.dashboard.charts import share_chart
from fairgate.admin.dashboard.decisions import DecisionRing
from fairgate.admin.dashboard.history import ShareHistory
from fairgate.admin.fairshare import FairShareMonitor
from fairgate.admission import AdmissionController
from fairgate.core.clock import Clock
from fairgate.limits import StateUnavailable
from fairgate.routing import Decision
from fairgate.upstream.registry import ReplicaRegistry

__all__ = ["BandRow", "Board", "DashboardView", "DecisionRow", "OrgRow", "PoolView", "ReplicaRow"]


@dataclass(frozen=True, slots=True)
class OrgRow:
    """One organisation in one pool: slots in flight and its running fraction vs share."""

    org: str
    share: float
    reservation: int
    within_share: int
    borrowed: int
    running: float
    chart: Markup


@dataclass(frozen=True, slots=True)
class BandRow:
    name: str
    ceiling: float
    depth: int
    never_held: bool


@dataclass(frozen=True, slots=True)
class ReplicaRow:
    model: str
    name: str
    healthy: bool
    breaker: str
    in_flight: int
    running: float | None
    waiting: float | None
    kv_usage: float | None


@dataclass(frozen=True, slots=True)
class DecisionRow:
    at: float
    model: str
    strategy: str
    replica: str | None
    dropped: tuple[tuple[str, tuple[str, ...]], ...]
    totals: tuple[tuple[str, float], ...]
    scores: tuple[tuple[str, tuple[tuple[str, float], ...]], ...]


@dataclass(frozen=True, slots=True)
class PoolView:
    name: str
    models: tuple[str, ...]
    capacity: float | None
    saturation: float | None
    queued: int
    bands: tuple[BandRow, ...]
    orgs: tuple[OrgRow, ...]
    replicas: tuple[ReplicaRow, ...]
    decisions: tuple[DecisionRow, ...]


@dataclass(frozen=True, slots=True)
class DashboardView:
    """Everything on the page at wall time ``at``; ``fairshare_error`` when the state
    back end did not answer (the rest of the page is still shown)."""

    at: float
    pools: tuple[PoolView, ...]
    fairshare_error: str | None
    history_window: float


class Board:
    """Assembles :class:`DashboardView`; ``pools`` maps each pool (a model without a pool
    is its own) to its models, in the order the page lists them; each pool shows its
    newest ``decisions_shown`` routing decisions."""

    def __init__(
        self,
        *,
        pools: Mapping[str, Sequence[str]],
        registry: ReplicaRegistry,
        decisions: DecisionRing,
        clock: Clock,
        monitor: FairShareMonitor | None = None,
        history: ShareHistory | None = None,
        admission: Mapping[str, AdmissionController] | None = None,
        decisions_shown: int = 10,
    ) -> None:
        self._pools = {name: tuple(models) for name, models in pools.items()}
        self._registry = registry
        self._decisions = decisions
        self._clock = clock
        self._monitor = monitor
        self._history = history
        self._admission = dict(admission or {})
        self._shown = decisions_shown

    async def view(self, orgs: Collection[str] | None) -> DashboardView:
        """The view now; ``orgs`` None shows every organisation, else exactly these."""
        at = self._clock.wall()
        fair: dict[str, Mapping[str, Any]] = {}
        error = None
        if self._monitor is not None:
            try:
                report = await self._monitor.report(orgs=orgs)
                fair = {p["pool"]: p for p in report["pools"]}
            except StateUnavailable:
                error = "the fair-share state back end does not answer; numbers are missing"
        pools = tuple(
            self._pool(name, models, fair.get(name), at) for name, models in self._pools.items()
        )
        window = self._history.window if self._history is not None else 0.0
        return DashboardView(at, pools, error, window)

    def _pool(
        self, name: str, models: tuple[str, ...], fair: Mapping[str, Any] | None, at: float
    ) -> PoolView:
        controller = self._admission.get(name)
        bands: tuple[BandRow, ...] = ()
        saturation = None
        if controller is not None:
            saturation = controller.saturation()
            bands = tuple(
                BandRow(b.name, b.ceiling, controller.depth(b.name), b.never_held)
                for b in controller.bands
            )
        capacity = None if fair is None else float(fair["capacity"])
        rows = (
            ()
            if fair is None
            else tuple(self._org(name, row, capacity or 1.0, at) for row in fair["orgs"])
        )
        latest = self._decisions.latest(models)[: self._shown]
        decisions = tuple(_decision(t, d) for t, d in latest)
        return PoolView(
            name=name,
            models=models,
            capacity=capacity,
            saturation=saturation,
            queued=controller.depth() if controller is not None else 0,
            bands=bands,
            orgs=rows,
            replicas=tuple(self._replicas(models)),
            decisions=decisions,
        )

    def _org(self, pool: str, row: Mapping[str, Any], capacity: float, at: float) -> OrgRow:
        borrowed = int(row["this_gateway"]["borrowing_in_flight"])
        within = int(row["within_share_in_flight"])
        points = self._history.series(pool, row["org"]) if self._history is not None else []
        window = self._history.window if self._history is not None else 3600.0
        return OrgRow(
            org=row["org"],
            share=float(row["share"]),
            reservation=int(row["reservation"]),
            within_share=within,
            borrowed=borrowed,
            running=(within + borrowed) / capacity,
            chart=share_chart(
                points, now=at, window=window, label=f"{row['org']} in {pool}: running vs share"
            ),
        )

    def _replicas(self, models: tuple[str, ...]) -> list[ReplicaRow]:
        rows = []
        for model in models:
            for replica in self._registry.replicas(model):
                snap = replica.snapshot()
                rows.append(
                    ReplicaRow(
                        model=model,
                        name=replica.name,
                        healthy=snap.healthy,
                        breaker=replica.breaker.state,
                        in_flight=snap.in_flight,
                        running=snap.running,
                        waiting=snap.waiting,
                        kv_usage=snap.kv_usage,
                    )
                )
        return rows


def _decision(at: float, decision: Decision) -> DecisionRow:
    names = sorted(decision.totals, key=lambda n: -decision.totals[n])
    return DecisionRow(
        at=at,
        model=decision.model,
        strategy=decision.strategy,
        replica=decision.replica,
        dropped=tuple((d.filter, d.replicas) for d in decision.dropped),
        totals=tuple((n, decision.totals[n]) for n in names),
        scores=tuple(
            (scorer, tuple((n, values[n]) for n in names if n in values))
            for scorer, values in decision.scores.items()
        ),
    )
