"""Routing: which replica of a model serves a request. filter → score → pick.

Pure: no I/O, no event loop. The caller hands in frozen replica snapshots,
the request's features, a random source and its routing state; it gets back a
:class:`Decision` naming the replica and carrying the rationale (what each
filter dropped, what each scorer gave each replica).

    total(r) = Σ weightᵢ · scoreᵢ(r) / Σ weightᵢ        every score in [0, 1]

    strategy = preset("chat")                 # or strategy_for(model's routing from config)
    decision = route(strategy, snapshots, RequestFeatures("llama-3.3-70b", session, hashes),
                     rng, RoutingState(cursor, prefix_index))
    decision.replica, decision.drops, decision.scores, decision.log_line()

Plugin names: filters ``healthy``, ``breaker-closed``, ``serves-model``,
``kv-ceiling``, ``fair-share`` (its arithmetic in :mod:`fairgate.routing.share`);
scorers ``queue-depth``, ``kv-usage``, ``in-flight``, ``weight``,
``session-affinity``, ``prefix-affinity``; pickers ``max-score``,
``power-of-two``, ``softmax``, ``round-robin``.
"""

from __future__ import annotations

from fairgate.routing.decision import Decision, FilterDrop
from fairgate.routing.features import RequestFeatures
from fairgate.routing.pipeline import route
from fairgate.routing.plugin import Filter, Pick, Picker, Scorer
from fairgate.routing.prefix import PrefixIndex, prefix_hashes
from fairgate.routing.registry import (
    FILTERS,
    PICKERS,
    PRESETS,
    SCORERS,
    build_filter,
    build_picker,
    build_scorer,
    build_strategy,
    preset,
    strategy_for,
    with_fair_share,
)
from fairgate.routing.ring import HashRing
from fairgate.routing.state import RoutingState
from fairgate.routing.strategy import Strategy, WeightedScorer

__all__ = [
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
]
