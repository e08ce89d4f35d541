"""kv-usage: more free KV is better."""

from __future__ import annotations

import pytest

from fairgate.routing import RequestFeatures, RoutingState
from fairgate.routing.scorers.kv_usage import KvUsageScorer

from ..replicas import MODEL, replica


def test_free_kv_is_the_score() -> None:
    replicas = [
        replica(n, kv_usage=k) for n, k in (("a", 0.0), ("b", 0.75), ("c", 1.2), ("d", None))
    ]
    scores = KvUsageScorer().score(replicas, RequestFeatures(MODEL), RoutingState())
    assert scores == pytest.approx([1.0, 0.25, 0.0, 0.5])
