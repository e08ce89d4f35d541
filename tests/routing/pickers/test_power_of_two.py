"""power-of-two: the better of two random draws, so never the single worst."""

from __future__ import annotations

import random
from collections import Counter

from fairgate.routing.pickers.power_of_two import PowerOfTwoPicker

from ..replicas import replica


def test_the_worst_replica_is_never_picked_and_the_best_most_often() -> None:
    scored = [(replica(n), s) for n, s in (("a", 0.1), ("b", 0.4), ("c", 0.6), ("d", 0.9))]
    rng = random.Random(5)
    counts = Counter(PowerOfTwoPicker().pick(scored, rng, 0).replica.name for _ in range(1200))  # type: ignore[union-attr]
    assert "a" not in counts
    # P(d) = 1/2, P(c) = 1/3, P(b) = 1/6 with two distinct draws out of four.
    assert counts["d"] > counts["c"] > counts["b"] > 100


def test_a_single_replica_is_picked_without_drawing() -> None:
    only = replica("only")
    rng = random.Random(1)
    state = rng.getstate()
    assert PowerOfTwoPicker().pick([(only, 0.0)], rng, 2).replica is only
    assert rng.getstate() == state
