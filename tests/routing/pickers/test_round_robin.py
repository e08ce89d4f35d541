"""round-robin: every replica in turn, the cursor handed back."""

from __future__ import annotations

import random

from fairgate.routing.pickers.round_robin import RoundRobinPicker

from ..replicas import replica


def test_replicas_take_turns_in_name_order_whatever_the_scores() -> None:
    scored = [(replica("c"), 0.9), (replica("a"), 0.0), (replica("b"), 0.5)]
    cursor, seen = 0, []
    for _ in range(6):
        pick = RoundRobinPicker().pick(scored, random.Random(0), cursor)
        assert pick.replica is not None
        seen.append(pick.replica.name)
        cursor = pick.cursor
    assert seen == ["a", "b", "c", "a", "b", "c"]
    assert cursor == 6
