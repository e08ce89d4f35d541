"""max-score: the best total wins; ties are shared."""

from __future__ import annotations

import random
from collections import Counter

from fairgate.routing.pickers.max_score import MaxScorePicker

from ..replicas import replica


def test_the_best_total_wins() -> None:
    a, b, c = replica("a"), replica("b"), replica("c")
    pick = MaxScorePicker().pick([(a, 0.2), (b, 0.9), (c, 0.5)], random.Random(1), 5)
    assert pick.replica is b and pick.cursor == 5


def test_ties_are_spread_over_the_tied_replicas() -> None:
    tied = [(replica(n), 0.5) for n in "abc"] + [(replica("d"), 0.1)]
    rng = random.Random(3)
    counts = Counter(MaxScorePicker().pick(tied, rng, 0).replica.name for _ in range(600))  # type: ignore[union-attr]
    assert set(counts) == {"a", "b", "c"}
    assert min(counts.values()) > 120
