"""A Strategy refuses what would make its rationale ambiguous or its totals meaningless."""

from __future__ import annotations

import math

import pytest

from fairgate.routing import Strategy, WeightedScorer, build_strategy, preset
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


def test_names_and_shares_are_derived_once() -> None:
    strategy = build_strategy("s", {"scorers": {"queue-depth": 3, "kv-usage": 1, "weight": 0}})
    assert strategy.scorer_names == ("queue-depth", "kv-usage", "weight")
    assert strategy.filter_names == (
        "healthy",
        "breaker-closed",
        "serves-model",
        "kv-ceiling",
        "fair-share",
    )
    assert strategy.shares == (0.75, 0.25, 0.0)
    silent = build_strategy("z", {"scorers": {"kv-usage": 0}})
    assert silent.shares == (0.0,)


def test_a_strategy_says_which_request_features_it_reads() -> None:
    assert preset("chat").uses_session and preset("chat").uses_prefix
    assert not preset("batch").uses_session and not preset("batch").uses_prefix
    assert preset("long-context").uses_prefix and not preset("long-context").uses_session
