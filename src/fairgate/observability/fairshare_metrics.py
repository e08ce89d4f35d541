"""Fair-share gauges per pool and organisation, from the report of ``GET /admin/fairshare``.

    metrics = FairShareMetrics(monitor, registry)      # one collector on the registry
    task = asyncio.create_task(metrics.run(15.0))      # a fresh report every 15 s; cancel to stop

A Prometheus scrape cannot await the state back end, so ``run`` takes a report
every ``interval`` and the collector serves the last one. Families (labels
``pool``, ``org`` unless said):

    fairgate_fairshare_capacity{pool}               C of the pool (configured or learned)
    fairgate_fairshare_capacity_learned{pool}       1 when C is learned from the engines, else 0
    fairgate_fairshare_capacity_replica{pool,replica}  a replica's learned value (auto only)
    fairgate_fairshare_capacity_changed_timestamp_seconds{pool}  when a learned C last moved
    fairgate_fairshare_share                        configured share
    fairgate_fairshare_reservation                  reserved concurrency
    fairgate_fairshare_within_share_in_flight       slots held, all gateways (do not sum them)
    fairgate_fairshare_borrowing_in_flight          borrowing requests of this gateway (sum them)
    fairgate_fairshare_usage                        decayed usage, cost units
    fairgate_fairshare_level                        LF = S / U, +Inf without usage
    fairgate_fairshare_rank                         a borrower's rank now, 0 served first
    fairgate_fairshare_up                           1 if the last report succeeded, else 0
    fairgate_fairshare_updated_timestamp_seconds    when the values were read (Unix s)

When a report fails (state back end down), the values of the last good one stay
and ``up`` drops to 0; an organisation that left the report leaves the gauges.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from fairgate.limits import StateUnavailable

__all__ = ["FairShareMetrics", "FairShareReporter"]

log = logging.getLogger("fairgate.fairshare")

# (field of an organisation's row, found in its ``this_gateway``?, family, help)
_ORG_GAUGES: tuple[tuple[str, bool, str, str], ...] = (
    ("share", False, "fairgate_fairshare_share", "Configured share of the pool"),
    ("reservation", False, "fairgate_fairshare_reservation", "Reserved concurrency"),
    (
        "within_share_in_flight",
        False,
        "fairgate_fairshare_within_share_in_flight",
        "Requests holding a reserved slot, counted by every gateway on the state back end",
    ),
    (
        "borrowing_in_flight",
        True,
        "fairgate_fairshare_borrowing_in_flight",
        "Borrowing requests this gateway has in flight",
    ),
    ("usage", False, "fairgate_fairshare_usage", "Decayed usage in cost units"),
    ("level", False, "fairgate_fairshare_level", "Level fairshare LF = S / U (+Inf: no usage)"),
    ("rank", False, "fairgate_fairshare_rank", "Rank of a borrowing request now (0 first)"),
)


class FairShareReporter(Protocol):
    """What the gauges read: ``fairgate.admin.fairshare.FairShareMonitor``."""

    async def report(self) -> Mapping[str, Any]: ...


class FairShareMetrics(Collector):
    """Fair-share gauges on ``registry``, refreshed by ``refresh`` / ``run``."""

    def __init__(self, reporter: FairShareReporter, registry: CollectorRegistry) -> None:
        self._reporter = reporter
        self._report: Mapping[str, Any] | None = None
        self._up = False
        registry.register(self)

    async def refresh(self) -> bool:
        """Take one report; False (values kept, ``up`` 0) when the state is unavailable."""
        try:
            report = await self._reporter.report()
        except StateUnavailable as exc:
            self._up = False
            log.warning("fair-share metrics: state unavailable: %s", exc)
            return False
        self._report, self._up = report, True
        return True

    async def run(self, interval: float) -> None:
        """``refresh`` every ``interval`` seconds until cancelled; never stops on an error."""
        while True:
            try:
                await self.refresh()
            except Exception:
                self._up = False
                log.exception("fair-share metrics: the report failed")
            await asyncio.sleep(interval)

    def describe(self) -> Iterator[Metric]:
        return self._families(None)

    def collect(self) -> Iterator[Metric]:
        return self._families(self._report)

    def _families(self, report: Mapping[str, Any] | None) -> Iterator[Metric]:
        capacity = GaugeMetricFamily(
            "fairgate_fairshare_capacity", "Concurrency the pool sustains (C)", labels=["pool"]
        )
        gauges = [
            (field, here, GaugeMetricFamily(name, text, labels=["pool", "org"]))
            for field, here, name, text in _ORG_GAUGES
        ]
        auto = GaugeMetricFamily(
            "fairgate_fairshare_capacity_learned",
            "1 when the pool's C is learned from the engines (capacity: auto)",
            labels=["pool"],
        )
        per_replica = GaugeMetricFamily(
            "fairgate_fairshare_capacity_replica",
            "A replica's learned part of C (requests it sustains without preemption)",
            labels=["pool", "replica"],
        )
        changed = GaugeMetricFamily(
            "fairgate_fairshare_capacity_changed_timestamp_seconds",
            "When the learned C of the pool last moved (Unix time)",
            labels=["pool"],
        )
        for pool in () if report is None else report["pools"]:
            capacity.add_metric([pool["pool"]], float(pool["capacity"]))
            learned = pool.get("capacity_learned")
            auto.add_metric([pool["pool"]], 0.0 if learned is None else 1.0)
            if learned is not None:
                for replica, value in learned["replicas"].items():
                    per_replica.add_metric([pool["pool"], replica], float(value))
                if learned["changed_at"] is not None:
                    changed.add_metric([pool["pool"]], float(learned["changed_at"]))
            for row in pool["orgs"]:
                labels = [pool["pool"], row["org"]]
                for field, here, family in gauges:
                    value = row["this_gateway"][field] if here else row[field]
                    family.add_metric(labels, math.inf if value is None else float(value))
        yield capacity
        yield auto
        yield per_replica
        yield changed
        yield from (family for _, _, family in gauges)
        yield GaugeMetricFamily(
            "fairgate_fairshare_up",
            "1 when the last fair-share report succeeded",
            value=1.0 if self._up else 0.0,
        )
        updated = GaugeMetricFamily(
            "fairgate_fairshare_updated_timestamp_seconds",
            "When the fair-share gauges were read from the state back end (Unix time)",
        )
        if report is not None:
            updated.add_metric([], float(report["at"]))
        yield updated
