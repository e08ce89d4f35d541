"""Routing decisions as Prometheus metrics: where requests went, what filters removed, why.

    fairgate_routing_decisions_total{model, strategy, replica}   decisions; replica "none"
                                                                 when no replica was left
    fairgate_routing_filter_drops_total{model, filter}           replicas a filter removed,
                                                                 summed over decisions
    fairgate_routing_score{model, replica, scorer}               each scorer's value in the
                                                                 model's latest decision
    fairgate_routing_total_score{model, replica}                 the weighted total there

The counters cost a dict lookup and an ``inc`` per decision (label children
are cached, and count without a lock: ``observability.loop_metrics``). The scores
are not pushed per request: the latest decision of each model is kept, and its
rationale is read when ``/metrics`` is scraped.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from fairgate.observability.loop_metrics import LoopCounter
from fairgate.routing import Decision

__all__ = ["RoutingMetrics"]

_NONE = "none"


class RoutingMetrics:
    """Registers the routing families on ``registry``; ``observe`` is the registry's callback.

    Label values come from configuration only (model, strategy, replica,
    filter and scorer names), so the series are bounded by the configuration.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self._decisions = LoopCounter(
            "fairgate_routing_decisions",
            "Routing decisions by model, strategy and chosen replica ('none': no replica left)",
            ["model", "strategy", "replica"],
            registry=registry,
        )
        self._drops = LoopCounter(
            "fairgate_routing_filter_drops",
            "Replicas removed by a routing filter, summed over decisions, by model and filter",
            ["model", "filter"],
            registry=registry,
        )
        self._chosen: dict[tuple[str, str, str | None], LoopCounter] = {}
        self._dropped: dict[tuple[str, str], LoopCounter] = {}
        self._latest: dict[str, Decision] = {}
        registry.register(_LatestScores(self._latest))

    def observe(self, decision: Decision) -> None:
        """Count one decision (what ``ReplicaRegistry(on_decision=…)`` calls)."""
        key = (decision.model, decision.strategy, decision.replica)
        child = self._chosen.get(key)
        if child is None:
            child = self._decisions.labels(key[0], key[1], key[2] or _NONE)
            self._chosen[key] = child
        child.inc()
        for drop in decision.dropped:
            pair = (decision.model, drop.filter)
            counter = self._dropped.get(pair)
            if counter is None:
                counter = self._dropped[pair] = self._drops.labels(*pair)
            counter.inc(len(drop.replicas))
        self._latest[decision.model] = decision


class _LatestScores(Collector):
    """Each model's latest decision, as gauges, built at scrape time."""

    def __init__(self, latest: dict[str, Decision]) -> None:
        self._latest = latest

    def collect(self) -> Iterator[Metric]:
        scores = GaugeMetricFamily(
            "fairgate_routing_score",
            "Each scorer's value per replica in the model's latest routing decision (0..1)",
            labels=["model", "replica", "scorer"],
        )
        totals = GaugeMetricFamily(
            "fairgate_routing_total_score",
            "Weighted total per replica in the model's latest routing decision (0..1)",
            labels=["model", "replica"],
        )
        for model, decision in list(self._latest.items()):
            for scorer, values in decision.scores.items():
                for replica, value in values.items():
                    scores.add_metric([model, replica, scorer], value)
            for replica, total in decision.totals.items():
                totals.add_metric([model, replica], total)
        yield scores
        yield totals

    def describe(self) -> Iterator[Metric]:
        return iter(())
