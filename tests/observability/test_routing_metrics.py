"""Routing decisions as metrics: counts by replica, filter drops, the latest rationale."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fairgate.core.replica import ReplicaSnapshot
from fairgate.observability.routing_metrics import RoutingMetrics
from fairgate.routing import RequestFeatures, build_strategy, route

STRATEGY = build_strategy("test", {"scorers": {"queue-depth": 2, "kv-usage": 1}})
FLEET = [
    ReplicaSnapshot("a", "llama", waiting=0.0, kv_usage=0.9),
    ReplicaSnapshot("b", "llama", waiting=4.0, kv_usage=0.1),
    ReplicaSnapshot("sick", "llama", healthy=False),
]


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_decisions_drops_and_the_latest_scores_are_exported() -> None:
    registry = CollectorRegistry()
    metrics = RoutingMetrics(registry)
    rng = random.Random(0)
    for _ in range(3):
        metrics.observe(route(STRATEGY, FLEET, RequestFeatures("llama"), rng))
    metrics.observe(route(STRATEGY, FLEET[2:], RequestFeatures("llama"), rng))
    found = samples(registry)
    labels = (("model", "llama"), ("replica", "a"), ("strategy", "test"))
    assert found[("fairgate_routing_decisions_total", labels)] == 3
    none = (("model", "llama"), ("replica", "none"), ("strategy", "test"))
    assert found[("fairgate_routing_decisions_total", none)] == 1
    drops = (("filter", "healthy"), ("model", "llama"))
    assert found[("fairgate_routing_filter_drops_total", drops)] == 4
    # The latest decision had no replica left: no scores. Another decision replaces it.
    assert not [k for k in found if k[0] == "fairgate_routing_score"]
    metrics.observe(route(STRATEGY, FLEET, RequestFeatures("llama"), rng))
    found = samples(registry)
    score = (("model", "llama"), ("replica", "b"), ("scorer", "kv-usage"))
    assert found[("fairgate_routing_score", score)] == 0.9
    total = (("model", "llama"), ("replica", "a"))
    assert abs(found[("fairgate_routing_total_score", total)] - 0.7) < 1e-9


def test_replicas_the_fair_share_rule_passed_over_are_counted() -> None:
    registry = CollectorRegistry()
    metrics = RoutingMetrics(registry)
    rng = random.Random(0)
    promised = ReplicaSnapshot("e1", "llama", in_flight=8, within_share=8, seats=8.0)
    free = ReplicaSnapshot("e2", "llama", in_flight=3, within_share=3, seats=8.0)
    within = RequestFeatures("llama", within_share=True)
    for _ in range(2):
        decision = route(STRATEGY, [promised, free], within, rng)
        assert decision.replica == "e2"
        assert decision.dropped_by("fair-share") == ("e1",)
        metrics.observe(decision)
    # Outside fair share the rule passes nothing over.
    metrics.observe(route(STRATEGY, [promised, free], RequestFeatures("llama"), rng))
    drops = (("filter", "fair-share"), ("model", "llama"))
    assert samples(registry)[("fairgate_routing_filter_drops_total", drops)] == 2
