"""Every registered Scorer honours the contract: one score per replica, in [0, 1], deterministic."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairgate.core.replica import ReplicaSnapshot
from fairgate.routing import SCORERS, PrefixIndex, RequestFeatures, RoutingState, build_scorer
from fairgate.routing.plugin import Scorer

from ..replicas import MODEL, replica_lists


def _state(replicas: list[ReplicaSnapshot], hashes: tuple[int, ...]) -> RoutingState:
    index = PrefixIndex(blocks_per_replica=64)
    for i, r in enumerate(replicas):
        index.record(r.name, hashes[: i % (len(hashes) + 1)])
    return RoutingState(cursor=3, prefix_index=index)


features = st.builds(
    RequestFeatures,
    model=st.just(MODEL),
    session_key=st.one_of(st.none(), st.text(max_size=8)),
    prefix_hashes=st.lists(st.integers(0, 2**64 - 1), max_size=6).map(tuple),
)


@pytest.mark.parametrize("name", list(SCORERS))
@settings(max_examples=100, deadline=None)
@given(replicas=replica_lists, request=features)
def test_scores_are_aligned_bounded_and_deterministic(
    name: str, replicas: list[ReplicaSnapshot], request: RequestFeatures
) -> None:
    scorer: Scorer = build_scorer(name)
    state = _state(replicas, request.prefix_hashes)
    scores = scorer.score(replicas, request, state)
    assert len(scores) == len(replicas)
    assert all(isinstance(s, float) and 0.0 <= s <= 1.0 for s in scores)
    assert scorer.score(replicas, request, state) == scores
    assert build_scorer(name).score(replicas, request, state) == scores  # no hidden history


@pytest.mark.parametrize("name", list(SCORERS))
def test_empty_input_gives_no_scores(name: str) -> None:
    scorer = build_scorer(name)
    assert scorer.score([], RequestFeatures(MODEL, "s", (1, 2)), RoutingState()) == []
    assert scorer.name == name
