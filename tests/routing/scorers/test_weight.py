"""weight: relative to the heaviest candidate."""

from __future__ import annotations

import pytest

from fairgate.routing import RequestFeatures, RoutingState
from fairgate.routing.scorers.weight import WeightScorer

from ..replicas import MODEL, replica


def test_weight_relative_to_the_heaviest() -> None:
    replicas = [replica("a", weight=1), replica("b", weight=4), replica("c", weight=0)]
    scores = WeightScorer().score(replicas, RequestFeatures(MODEL), RoutingState())
    assert scores == pytest.approx([0.25, 1.0, 0.0])
    zero = WeightScorer().score([replica("z", weight=0)], RequestFeatures(MODEL), RoutingState())
    assert zero == [0.0]
