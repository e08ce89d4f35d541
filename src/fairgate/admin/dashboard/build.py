"""The dashboard's parts as the composition root builds them (one call in ``app.py``).

ring = DecisionRing(DECISIONS_KEPT, clock)          # before the registry: its on_decision
board, history = build_board(models=[(m.name, m.pool) for m in config.models], ...)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fairgate.admin.dashboard.decisions import DecisionRing
from fairgate.admin.dashboard.history import ShareHistory
from fairgate.admin.dashboard.view import Board
from fairgate.admin.fairshare import FairShareMonitor
from fairgate.admission import AdmissionController
from fairgate.core.clock import Clock
from fairgate.upstream.registry import ReplicaRegistry

__all__ = ["DECISIONS_KEPT", "HISTORY_WINDOW", "SAMPLE_INTERVAL", "build_board"]

DECISIONS_KEPT = 200
"""Routing decisions kept for the whole gateway (the page shows each pool's newest)."""

SAMPLE_INTERVAL = 5.0
"""Seconds between two samples of the running fraction vs share."""

HISTORY_WINDOW = 3600.0
"""Seconds of history the chart shows (720 points per organisation and pool)."""

DECISIONS_SHOWN = 10
"""Decisions shown per pool."""


def build_board(
    *,
    models: Sequence[tuple[str, str | None]],
    registry: ReplicaRegistry,
    decisions: DecisionRing,
    clock: Clock,
    monitor: FairShareMonitor | None,
    admission: Mapping[str, AdmissionController],
) -> tuple[Board, ShareHistory | None]:
    """The board over ``models`` (name, pool) grouped by pool (a model without one is its
    own), and the history to sample (None without fair share: there is no share)."""
    pools: dict[str, list[str]] = {}
    for name, pool in models:
        pools.setdefault(pool or name, []).append(name)
    history = (
        ShareHistory(monitor.report, interval=SAMPLE_INTERVAL, window=HISTORY_WINDOW)
        if monitor is not None
        else None
    )
    board = Board(
        pools=pools,
        registry=registry,
        decisions=decisions,
        clock=clock,
        monitor=monitor,
        history=history,
        admission=admission,
        decisions_shown=DECISIONS_SHOWN,
    )
    return board, history
