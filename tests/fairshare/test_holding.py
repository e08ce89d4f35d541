"""Held borrowers leave by their organisation's rank at dispatch, then class, then arrival."""

from __future__ import annotations

import pytest

from fairgate.fairshare.holding import SEATLESS, HeldBorrowers


def ranks(**by_org: int) -> dict[tuple[str, str], int]:
    """Ranks of organisations without team sub-shares (their team is "")."""
    return {(org, ""): rank for org, rank in by_org.items()}


def drain(queue: HeldBorrowers[str]) -> list[str]:
    out = []
    while (item := queue.pop()) is not None:
        out.append(item)
    return out


def filled(*items: tuple[str, int]) -> HeldBorrowers[str]:
    """Items named like ``A1`` (organisation A), pushed in order with their class."""
    queue: HeldBorrowers[str] = HeldBorrowers()
    for key, (name, cls) in enumerate(items):
        queue.push(key, name[0], cls, name)
    return queue


def test_the_better_rank_goes_first_whatever_its_class_then_class_then_arrival() -> None:
    queue = filled(("A1", 0), ("A2", 0), ("B1", 1), ("B2", 0), ("A3", 1))
    queue.rerank(ranks(A=1, B=0))
    assert drain(queue) == ["B2", "B1", "A1", "A2", "A3"]


def test_a_rank_that_moves_reorders_what_is_already_held() -> None:
    # The point of holding: a borrower's place follows its organisation's rank now,
    # not the rank it had when it arrived.
    queue = filled(("A1", 0), ("B1", 0), ("A2", 0), ("B2", 0))
    queue.rerank(ranks(A=0, B=1))
    assert queue.pop() == "A1"
    queue.rerank(ranks(A=1, B=0))
    assert queue.pop() == "B1"
    assert queue.pop() == "B2"
    queue.rerank(ranks(A=0, B=0))
    assert drain(queue) == ["A2"]


def test_equal_ranks_serve_by_arrival_across_organisations() -> None:
    queue = filled(("A1", 0), ("B1", 0), ("C1", 0), ("A2", 0), ("B2", 0))
    queue.rerank(ranks(A=2, B=2, C=2))
    assert drain(queue) == ["A1", "B1", "C1", "A2", "B2"]


def test_an_organisation_joining_later_is_served_by_the_rank_given_before_the_pop() -> None:
    queue = filled(("A1", 0))
    queue.rerank(ranks(A=0))
    queue.push(10, "B", 0, "B1")
    queue.rerank(ranks(A=0, B=3))
    queue.push(11, "C", 0, "C1")
    queue.rerank(ranks(A=1, B=3, C=0))
    assert drain(queue) == ["C1", "A1", "B1"]


def test_a_caller_who_left_is_taken_out_head_or_not() -> None:
    queue = filled(("A1", 0), ("A2", 0), ("A3", 0), ("B1", 0))
    queue.rerank(ranks(A=0, B=1))
    assert queue.remove(0) == "A1"  # the head of its line
    assert queue.remove(2) == "A3"  # behind another
    assert queue.remove(2) is None  # not held any more
    assert 1 in queue and 0 not in queue
    assert len(queue) == 2 and queue.held("A") == 1
    assert drain(queue) == ["A2", "B1"]
    assert queue.owners() == set()


def test_a_freed_seat_of_the_reservation_takes_the_organisations_own_best() -> None:
    queue = filled(("A1", 1), ("B1", 0), ("A2", 0), ("A3", 0))
    queue.rerank(ranks(A=5, B=0))
    assert queue.pop_org("A") == "A2"  # interactive before batch, whatever the ranks
    assert queue.pop_org("C") is None
    assert drain(queue) == ["B1", "A3", "A1"]


def test_a_freed_seat_never_takes_a_borrower_that_cannot_sit() -> None:
    # A request of several sequences always borrows: let go for a freed seat, it would
    # enter a full pool while its organisation's seated waiters stay held.
    queue = filled(("A-wide", SEATLESS), ("B1", 0), ("A1", 1))
    queue.rerank(ranks(A=0, B=1))
    assert queue.pop_org("A") == "A1"
    assert queue.pop_org("A") is None
    assert drain(queue) == ["A-wide", "B1"]  # by rank it still goes in its turn


def test_many_callers_leaving_leave_no_stale_entries_behind() -> None:
    queue: HeldBorrowers[int] = HeldBorrowers()
    queue.rerank(ranks(A=0, B=1))
    for key in range(2000):
        queue.push(key, "AB"[key % 2], 0, key)
        if key % 2 == 0:
            queue.remove(key)  # every A leaves while B waits behind
    assert len(queue) == 1000
    assert len(queue._heap) <= 2 * 2 + 16
    assert queue.pop() == 1


def test_with_team_sub_shares_each_team_of_an_organisation_has_its_own_rank() -> None:
    queue: HeldBorrowers[str] = HeldBorrowers()
    for key, (name, team) in enumerate([("A-x1", "x"), ("A-y1", "y"), ("A-x2", "x"), ("B1", "")]):
        queue.push(key, name[0], 0, name, team)
    queue.rerank({("A", "x"): 2, ("A", "y"): 1, ("B", ""): 0})
    assert queue.held("A") == 3 and queue.owners() == {("A", "x"), ("A", "y"), ("B", "")}
    assert drain(queue) == ["B1", "A-y1", "A-x1", "A-x2"]


def test_a_key_is_held_once() -> None:
    queue = filled(("A1", 0))
    with pytest.raises(ValueError, match="already held"):
        queue.push(0, "B", 0, "B1")
    assert queue.pop() == "A1" and queue.pop() is None


def test_an_item_held_again_with_its_arrival_keeps_its_place() -> None:
    # A borrower let go and held again comes back at the place it had: ahead of the
    # later arrivals of its line and of other lines of equal rank, behind earlier ones.
    queue = filled(("A1", 0), ("A2", 0), ("B1", 0), ("A3", 0))
    first = queue.pop()
    assert first == "A1"
    assert queue.pop_org("A") == "A2"
    queue.push(1, "A", 0, "A2", arrival=1)  # A2's arrival (the second push)
    queue.push(4, "A", 0, "A4")
    assert drain(queue) == ["A2", "B1", "A3", "A4"]
    assert len(queue) == 0
