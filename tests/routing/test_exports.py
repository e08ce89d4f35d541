"""The public names of fairgate.routing."""

from __future__ import annotations

import fairgate.routing as routing


def test_exported_members() -> None:
    assert set(routing.__all__) == {
        "FILTERS",
        "PICKERS",
        "PRESETS",
        "SCORERS",
        "Decision",
        "Filter",
        "FilterDrop",
        "HashRing",
        "Pick",
        "Picker",
        "PrefixIndex",
        "RequestFeatures",
        "RoutingState",
        "Scorer",
        "Strategy",
        "WeightedScorer",
        "build_filter",
        "build_picker",
        "build_scorer",
        "build_strategy",
        "prefix_hashes",
        "preset",
        "route",
        "strategy_for",
        "with_fair_share",
    }
    for name in routing.__all__:
        assert hasattr(routing, name)
