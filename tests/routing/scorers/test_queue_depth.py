"""queue-depth: fewer waiting is better, absolute, unknown is neutral."""

from __future__ import annotations

import pytest

from fairgate.routing import RequestFeatures, RoutingState
from fairgate.routing.scorers.queue_depth import QueueDepthScorer

from ..replicas import MODEL, replica


def test_the_score_halves_at_scale_and_unknown_is_neutral() -> None:
    replicas = [
        replica(n, waiting=w) for n, w in (("a", 0.0), ("b", 4.0), ("c", 12.0), ("d", None))
    ]
    scores = QueueDepthScorer(scale=4.0).score(replicas, RequestFeatures(MODEL), RoutingState())
    assert scores == pytest.approx([1.0, 0.5, 0.25, 0.5])


def test_invalid_scale_is_refused() -> None:
    with pytest.raises(ValueError):
        QueueDepthScorer(scale=0.0)
