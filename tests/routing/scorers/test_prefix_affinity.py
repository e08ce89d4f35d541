"""prefix-affinity: requests sharing a prompt prefix go where that prefix is cached."""

from __future__ import annotations

import random
import string

from fairgate.routing import (
    PrefixIndex,
    RequestFeatures,
    RoutingState,
    Strategy,
    build_strategy,
    prefix_hashes,
    route,
)
from fairgate.routing.scorers.prefix_affinity import PrefixAffinityScorer

from ..replicas import MODEL, replica

BLOCK = 64
CACHE_BLOCKS = 40  # what one replica's engine keeps of prompt prefixes


def test_the_score_is_the_matched_share_of_the_prefix() -> None:
    index = PrefixIndex()
    hashes = prefix_hashes("x" * (4 * BLOCK), BLOCK)
    index.record("warm", hashes)
    index.record("half", hashes[:2])
    replicas = [replica("warm"), replica("half"), replica("cold")]
    request = RequestFeatures(MODEL, prefix_hashes=hashes)
    scorer = PrefixAffinityScorer()
    assert scorer.score(replicas, request, RoutingState(prefix_index=index)) == [1.0, 0.5, 0.0]
    assert scorer.score(replicas, request, RoutingState()) == [0.0, 0.0, 0.0]
    assert scorer.score(replicas, RequestFeatures(MODEL), RoutingState(prefix_index=index)) == [
        0.0,
        0.0,
        0.0,
    ]


def _cache_hit_rate(strategy: Strategy, seed: int = 7) -> float:
    """Share of prefix blocks found in the chosen replica's cache, over a shared-prefix workload."""
    rng = random.Random(seed)
    letters = string.ascii_letters

    def text(blocks: int) -> str:
        return "".join(rng.choice(letters) for _ in range(blocks * BLOCK))

    groups = [text(8) for _ in range(12)]  # 12 system prompts of 8 blocks
    replicas = [replica(f"gpu{i}") for i in range(4)]
    engine_cache = PrefixIndex(CACHE_BLOCKS)  # what the engines really hold
    state = RoutingState(prefix_index=PrefixIndex(CACHE_BLOCKS))
    hits = total = 0
    for _ in range(600):
        hashes = prefix_hashes(rng.choice(groups) + text(2), BLOCK, max_blocks=16)
        decision = route(strategy, replicas, RequestFeatures(MODEL, None, hashes), rng, state)
        assert decision.replica is not None
        hits += engine_cache.matched(decision.replica, hashes)
        total += len(hashes)
        engine_cache.record(decision.replica, hashes)
        assert state.prefix_index is not None
        state.prefix_index.record(decision.replica, hashes)
        state = RoutingState(decision.cursor, state.prefix_index)
    return hits / total


def test_prefix_affinity_raises_cache_hits_over_round_robin() -> None:
    affine = _cache_hit_rate(build_strategy("affine", {"scorers": {"prefix-affinity": 1}}))
    turns = _cache_hit_rate(
        build_strategy("turns", {"scorers": {"in-flight": 1}, "picker": "round-robin"})
    )
    assert affine >= 0.6
    assert affine >= 2 * turns
