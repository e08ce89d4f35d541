"""The priority table and its invariant: within share always before any borrower."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairgate.fairshare.priority import Decision, PriorityClass, borrowing_priority, decide

INTER, BATCH = PriorityClass.INTERACTIVE, PriorityClass.BATCH


@pytest.mark.parametrize(
    ("in_flight", "reservation", "rank", "cls", "expected"),
    [
        (0, 8, 3, INTER, Decision("A", 0, True, None)),
        (7, 8, 3, BATCH, Decision("A", 1, True, None)),
        (8, 8, 0, INTER, Decision("A", 10, False, 0)),
        (8, 8, 0, BATCH, Decision("A", 11, False, 0)),
        (9, 8, 3, INTER, Decision("A", 40, False, 3)),
        (0, 0, 9, BATCH, Decision("A", 101, False, 9)),  # no reservation: always borrows
    ],
)
def test_the_priority_table(
    in_flight: int, reservation: int, rank: int, cls: PriorityClass, expected: Decision
) -> None:
    assert decide("A", in_flight, reservation, rank, cls) == expected


@pytest.mark.parametrize(
    ("in_flight", "reservation", "rank"), [(-1, 3, 0), (0, -1, 0), (0, 3, -1), (5, 3, 10)]
)
def test_out_of_range_input_is_refused(in_flight: int, reservation: int, rank: int) -> None:
    with pytest.raises(ValueError):
        decide("A", in_flight, reservation, rank, INTER)


def test_borrowing_priorities_span_10_to_101() -> None:
    every = {borrowing_priority(rank, cls) for rank in range(10) for cls in PriorityClass}
    assert min(every) == 10
    assert max(every) == 101
    assert len(every) == 20  # no two (rank, class) pairs collide


decisions = st.builds(
    decide,
    st.sampled_from(["A", "B", "C"]),
    st.integers(min_value=0, max_value=300),
    st.integers(min_value=0, max_value=300),
    st.integers(min_value=0, max_value=9),
    st.sampled_from(list(PriorityClass)),
)


@settings(max_examples=500, deadline=None)
@given(decisions, decisions)
def test_a_within_share_request_never_gets_a_larger_priority_than_a_borrower(
    one: Decision, other: Decision
) -> None:
    if one.within_share and not other.within_share:
        assert one.priority < other.priority
    if one.within_share:
        assert one.priority in (0, 1) and one.rank is None
    else:
        assert 10 <= one.priority <= 101 and one.rank is not None


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 9), st.integers(0, 9), st.sampled_from(list(PriorityClass)))
def test_a_better_rank_borrows_before_a_worse_one_whatever_the_class(
    better: int, worse: int, cls: PriorityClass
) -> None:
    if better < worse:
        assert borrowing_priority(better, PriorityClass.BATCH) < borrowing_priority(worse, cls)
