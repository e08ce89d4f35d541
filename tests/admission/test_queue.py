"""A band's waiting line: priority levels, then keys in turn, then arrival order."""

from __future__ import annotations

import pytest

from fairgate.admission import BandQueue, TenantRoundRobin


def drain(queue: BandQueue[str]) -> list[str]:
    out = []
    while (item := queue.pop()) is not None:
        out.append(item)
    return out


def test_the_documented_example() -> None:
    queue: BandQueue[str] = BandQueue()
    for key, name in enumerate(["A1", "A2", "A3", "B1", "C1", "A4", "B2"]):
        queue.push(key, name[0], 0, name)
    assert drain(queue) == ["A1", "B1", "C1", "A2", "B2", "A3", "A4"]
    assert len(queue) == 0 and queue.pop() is None


def test_lower_levels_first_then_keys_in_turn_within_a_level() -> None:
    queue: BandQueue[str] = BandQueue()
    arrivals = [("A", 20), ("B", 0), ("A", 0), ("C", 10), ("B", 0), ("A", 0)]
    for key, (tenant, level) in enumerate(arrivals):
        queue.push(key, tenant, level, f"{tenant}{level}#{key}")
    assert drain(queue) == ["B0#1", "A0#2", "B0#4", "A0#5", "C10#3", "A20#0"]


def test_a_removed_item_is_gone_and_its_key_may_be_used_again() -> None:
    queue: BandQueue[str] = BandQueue()
    queue.push(1, "A", 0, "a1")
    queue.push(2, "B", 5, "b2")
    queue.push(3, "A", 0, "a3")
    assert queue.remove(1) == "a1" and queue.remove(1) is None
    assert 1 not in queue and 3 in queue and len(queue) == 2
    assert queue.remove(2) == "b2"  # its level is now empty
    queue.push(2, "C", 5, "c2")
    assert drain(queue) == ["a3", "c2"]


def test_a_key_cannot_be_queued_twice() -> None:
    queue: BandQueue[str] = BandQueue()
    queue.push(1, "A", 0, "x")
    with pytest.raises(ValueError):
        queue.push(1, "B", 1, "y")


def test_a_tenant_that_comes_back_joins_the_end_of_the_line() -> None:
    line: TenantRoundRobin[str] = TenantRoundRobin()
    line.push(1, "A", "a1")
    line.push(2, "B", "b1")
    assert line.pop() == (1, "a1")  # A has nothing left and leaves the rotation
    line.push(3, "A", "a2")
    line.push(4, "C", "c1")
    assert [line.pop()[1] for _ in range(3)] == ["b1", "a2", "c1"]
    assert len(line) == 0
    with pytest.raises(IndexError):
        line.pop()
    assert line.remove(9, "Z") is None


def test_the_most_crowded_tenant_is_known_over_all_levels_and_gives_its_newest() -> None:
    q: BandQueue[str] = BandQueue()
    assert q.crowded() is None and q.evict_newest("a") is None
    for key, (tenant, level) in enumerate([("a", 1), ("b", 0), ("a", 0), ("a", 2), ("b", 1)]):
        q.push(key, tenant, level, f"{tenant}{key}")
    assert q.crowded() == ("a", 3) and (q.waiting("a"), q.waiting("b"), q.waiting("c")) == (3, 2, 0)
    assert q.evict_newest("a") == "a3"  # the last to arrive, whatever its level
    assert q.crowded() in (("a", 2), ("b", 2))
    assert q.pop() == "b1" and q.remove(4) == "b4"
    assert q.crowded() == ("a", 2) and q.waiting("b") == 0
    assert [q.pop(), q.pop(), q.pop()] == ["a2", "a0", None]
    assert q.crowded() is None and len(q) == 0
