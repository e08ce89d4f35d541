"""A sampled history of each organisation's running fraction against its share, per pool.

    history = ShareHistory(monitor.report, interval=5.0, window=3600.0)
    gateway task: await history.run()          # one sample every ``interval`` seconds
    history.series("b300", "A")                # [Point(at, running, share), ...] oldest first

A sample reads ``FairShareMonitor.report()`` (the state back end: every
gateway's within-share slots, plus this gateway's borrowers) and keeps, for
each organisation row of each pool, ``running`` = (within share in flight +
borrowing in flight here) / C and ``share`` = S. With C = 10 and A holding 6
reserved slots while borrowing 2: running = 0.8 against a share of 0.6.

Memory is bounded: at most ``window / interval`` points per series and at most
``max_series`` series (a new (pool, organisation) past that is not sampled);
points older than ``window`` are dropped at each sample, and a series left
without points goes. A sample that fails (the state back end is down) is
logged and skipped: the chart shows the gap.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Point", "ShareHistory"]

log = logging.getLogger("fairgate.admin")

Report = Callable[[], Awaitable[Mapping[str, Any]]]
"""What ``FairShareMonitor.report`` is: the body of ``GET /admin/fairshare``."""


@dataclass(frozen=True, slots=True)
class Point:
    """One sample: wall time ``at``, ``running`` in flight / C (>= 0), ``share`` S in [0, 1]."""

    at: float
    running: float
    share: float


class ShareHistory:
    """The last ``window`` seconds of samples taken every ``interval`` seconds.

    ``interval`` and ``window`` > 0 with ``window >= interval``; ``max_series``
    >= 1. Raises ``ValueError`` otherwise. Meant for one event loop.
    """

    def __init__(
        self,
        report: Report,
        *,
        interval: float = 5.0,
        window: float = 3600.0,
        max_series: int = 512,
    ) -> None:
        if not 0 < interval <= window:
            raise ValueError(f"need 0 < interval <= window, got {interval!r}, {window!r}")
        if max_series < 1:
            raise ValueError(f"max_series must be >= 1, got {max_series!r}")
        self.interval = float(interval)
        self.window = float(window)
        self._report = report
        self._points = math.ceil(window / interval) + 1
        self._max_series = max_series
        self._series: dict[tuple[str, str], deque[Point]] = {}

    def series(self, pool: str, org: str) -> list[Point]:
        """The points of ``org`` in ``pool``, oldest first (empty when never sampled)."""
        return list(self._series.get((pool, org), ()))

    async def sample(self) -> None:
        """Take one sample now (a failed read is logged and leaves the history as it was)."""
        try:
            body = await self._report()
        except Exception as exc:  # the state back end down: a gap, not a dead loop
            log.warning("dashboard: fair-share sample skipped: %s", exc)
            return
        self.record(body)

    def record(self, body: Mapping[str, Any]) -> None:
        """Add one point per organisation row of ``body`` (a fair-share report)."""
        at = float(body["at"])
        for pool in body["pools"]:
            capacity = float(pool["capacity"]) or 1.0
            for row in pool["orgs"]:
                here = row["this_gateway"]["borrowing_in_flight"]
                running = (row["within_share_in_flight"] + here) / capacity
                self._add((pool["pool"], row["org"]), Point(at, running, float(row["share"])))
        self._expire(at - self.window)

    async def run(self) -> None:
        """Sample every ``interval`` seconds until cancelled."""
        while True:
            await self.sample()
            await asyncio.sleep(self.interval)

    def _add(self, key: tuple[str, str], point: Point) -> None:
        points = self._series.get(key)
        if points is None:
            if len(self._series) >= self._max_series:
                return
            points = self._series[key] = deque(maxlen=self._points)
        points.append(point)

    def _expire(self, before: float) -> None:
        for key in list(self._series):
            points = self._series[key]
            while points and points[0].at < before:
                points.popleft()
            if not points:
                del self._series[key]
