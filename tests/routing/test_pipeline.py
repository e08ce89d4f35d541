"""route(): filters run in order and record drops, scorers are weighted, the picker chooses."""

from __future__ import annotations

import random

import pytest

from fairgate.core.replica import ReplicaSnapshot
from fairgate.routing import (
    FilterDrop,
    RequestFeatures,
    RoutingState,
    Strategy,
    WeightedScorer,
    build_strategy,
    route,
)
from fairgate.routing.pickers import MaxScorePicker

from .replicas import MODEL, replica

FLEET = [
    replica("a", waiting=0.0, kv_usage=0.9),
    replica("b", waiting=4.0, kv_usage=0.1),
    replica("sick", healthy=False),
    replica("tripped", breaker_open=True),
    ReplicaSnapshot("elsewhere", "other-model"),
    replica("full", kv_usage=0.97),
]
STRATEGY = build_strategy("test", {"scorers": {"queue-depth": 2, "kv-usage": 1}})


def test_each_filter_records_what_it_removed() -> None:
    decision = route(STRATEGY, FLEET, RequestFeatures(MODEL), random.Random(0))
    assert decision.drops == (
        FilterDrop("healthy", ("sick",)),
        FilterDrop("breaker-closed", ("tripped",)),
        FilterDrop("serves-model", ("elsewhere",)),
        FilterDrop("kv-ceiling", ("full",)),
        FilterDrop("fair-share", ()),  # the request is outside fair share
    )


def test_the_worked_example_of_the_module() -> None:
    decision = route(STRATEGY, FLEET, RequestFeatures(MODEL), random.Random(0))
    assert decision.scores == {
        "queue-depth": {"a": 1.0, "b": 0.5},
        "kv-usage": pytest.approx({"a": 0.1, "b": 0.9}),
    }
    assert decision.totals == pytest.approx({"a": 0.7, "b": 1.9 / 3})
    assert decision.replica == "a"
    assert (decision.strategy, decision.model) == ("test", MODEL)


def test_weights_change_the_choice() -> None:
    kv_first = build_strategy("kv", {"scorers": {"queue-depth": 1, "kv-usage": 3}})
    assert route(kv_first, FLEET, RequestFeatures(MODEL), random.Random(0)).replica == "b"


def test_no_replica_left_is_a_decision_with_its_reason() -> None:
    decision = route(STRATEGY, FLEET, RequestFeatures("unknown-model"), random.Random(0))
    assert decision.replica is None
    assert set(decision.dropped_by("serves-model")) == {"a", "b", "elsewhere", "full"}
    assert decision.totals == {}


def test_the_round_robin_cursor_comes_back_in_the_decision() -> None:
    turns = build_strategy("rr", {"scorers": {"in-flight": 1}, "picker": "round-robin"})
    state, chosen = RoutingState(), []
    for _ in range(4):
        decision = route(turns, FLEET, RequestFeatures(MODEL), random.Random(0), state)
        chosen.append(decision.replica)
        state = RoutingState(decision.cursor)
    assert chosen == ["a", "b", "a", "b"]


def test_zero_weights_keep_the_rationale_but_not_the_influence() -> None:
    silent = build_strategy("s", {"scorers": {"queue-depth": 0}})
    decision = route(silent, FLEET, RequestFeatures(MODEL), random.Random(0))
    assert decision.scores["queue-depth"] == {"a": 1.0, "b": 0.5}
    assert decision.totals == {"a": 0.0, "b": 0.0}


class _Broken:
    name = "broken"

    def score(self, replicas: object, request: RequestFeatures, state: RoutingState) -> list[float]:
        return [1.0]


def test_a_scorer_breaking_its_contract_is_an_error() -> None:
    strategy = Strategy("x", (), (WeightedScorer(_Broken(), 1.0),), MaxScorePicker())
    with pytest.raises(ValueError, match="broken"):
        route(
            strategy,
            FLEET[:2] + FLEET[:0] + [replica("c")],
            RequestFeatures(MODEL),
            random.Random(0),
        )


def test_a_decision_names_only_the_filters_that_removed_something() -> None:
    decision = route(STRATEGY, FLEET, RequestFeatures(MODEL), random.Random(0))
    assert [d.filter for d in decision.dropped] == [
        "healthy",
        "breaker-closed",
        "serves-model",
        "kv-ceiling",
    ]
    clean = route(STRATEGY, FLEET[:2], RequestFeatures(MODEL), random.Random(0))
    assert clean.dropped == ()
    assert clean.drops == tuple(FilterDrop(f, ()) for f in STRATEGY.filter_names)
    assert clean.as_dict()["drops"] == {f: [] for f in STRATEGY.filter_names}
    assert clean.log_line() == (
        "route strategy=test model=llama replica=a dropped=[] "
        "a=0.700(queue-depth=1.000 kv-usage=0.100) b=0.633(queue-depth=0.500 kv-usage=0.900)"
    )
