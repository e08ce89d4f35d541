"""A Strategy refuses what would make its rationale ambiguous or its totals meaningless."""

from __future__ import annotations

import math

import pytest

from fairgate.routing import Strategy, WeightedScorer
from fairgate.routing.filters import HealthyFilter
from fairgate.routing.pickers import MaxScorePicker
from fairgate.routing.scorers import KvUsageScorer


@pytest.mark.parametrize("weight", [-1.0, math.inf, math.nan])
def test_weights_must_be_finite_and_not_negative(weight: float) -> None:
    with pytest.raises(ValueError, match="kv-usage"):
        Strategy("s", (), (WeightedScorer(KvUsageScorer(), weight),), MaxScorePicker())


def test_a_plugin_appears_once() -> None:
    twice = (WeightedScorer(KvUsageScorer(), 1.0), WeightedScorer(KvUsageScorer(), 2.0))
    with pytest.raises(ValueError, match="scorer appears twice"):
        Strategy("s", (), twice, MaxScorePicker())
    with pytest.raises(ValueError, match="filter appears twice"):
        Strategy("s", (HealthyFilter(), HealthyFilter()), (), MaxScorePicker())
