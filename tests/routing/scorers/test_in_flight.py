"""in-flight: fewer gateway requests per unit of weight is better."""

from __future__ import annotations

import pytest

from fairgate.routing import RequestFeatures, RoutingState
from fairgate.routing.scorers.in_flight import InFlightScorer

from ..replicas import MODEL, replica


def test_load_is_counted_per_unit_of_weight() -> None:
    replicas = [
        replica("idle", in_flight=0),
        replica("busy", in_flight=8),
        replica("heavy", in_flight=8, weight=2),
        replica("off", in_flight=0, weight=0),
    ]
    scores = InFlightScorer(scale=8.0).score(replicas, RequestFeatures(MODEL), RoutingState())
    assert scores == pytest.approx([1.0, 0.5, 1 / 1.5, 0.0])
