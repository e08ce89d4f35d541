"""The operator dashboard on the admin listener: fair share, admission and the fleet at a glance.

    ring = DecisionRing(20, clock)                 # ReplicaRegistry(on_decision=...) feeds it
    history = ShareHistory(monitor.report)         # a Gateway task: await history.run()
    board = Board(pools=..., registry=..., decisions=ring, clock=clock, monitor=monitor,
                  history=history, admission=controllers)
    build_admin_app(..., dashboard=board)          # GET /admin/dashboard, /admin/dashboard/live

Modules: ``decisions`` (the ring of routing decisions), ``history`` (the
sampled running fraction vs share), ``view`` (the view model per pool),
``charts`` (SVG drawn on the server), ``pages`` (templates and page headers),
``access`` (who is calling), ``endpoints`` (the routes).
"""

from fairgate.admin.dashboard.decisions import DecisionRing
from fairgate.admin.dashboard.history import Point, ShareHistory
from fairgate.admin.dashboard.view import Board, DashboardView, PoolView

__all__ = ["Board", "DashboardView", "DecisionRing", "Point", "PoolView", "ShareHistory"]
