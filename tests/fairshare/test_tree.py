"""Fair Tree level fairshare and dense ranks."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairgate.fairshare.tree import MAX_RANK, dense_ranks, level_fairshare


def test_level_fairshare_is_normalised_share_over_normalised_usage() -> None:
    levels = level_fairshare({"A": 0.8125, "B": 0.1875}, {"A": 90.0, "B": 10.0})
    assert levels["A"] == pytest.approx(0.8125 / 0.9)
    assert levels["B"] == pytest.approx(0.1875 / 0.1)


def test_shares_are_normalised_over_the_pool() -> None:
    # Shares 0.3 / 0.2 of the pool (half unreserved) weigh like 0.6 / 0.4.
    assert level_fairshare({"A": 0.3, "B": 0.2}, {"A": 1.0, "B": 1.0}) == pytest.approx(
        {"A": 1.2, "B": 0.8}
    )


def test_no_usage_is_infinitely_under_served() -> None:
    assert level_fairshare({"A": 0.5, "B": 0.5}, {"A": 3.0}) == {"A": 0.5 / 1.0, "B": math.inf}
    assert level_fairshare({"A": 0.5, "B": 0.5}, {}) == {"A": math.inf, "B": math.inf}


def test_a_name_in_only_one_mapping_counts_with_zero() -> None:
    levels = level_fairshare({"A": 1.0}, {"A": 1.0, "stranger": 1.0})
    assert levels == {"A": 2.0, "stranger": 0.0}


@pytest.mark.parametrize(
    ("shares", "usage"),
    [({"A": -0.5}, {}), ({"A": 0.5}, {"A": -1.0}), ({"A": 0.5}, {"A": math.nan})],
)
def test_negative_or_nan_input_is_refused(
    shares: dict[str, float], usage: dict[str, float]
) -> None:
    with pytest.raises(ValueError):
        level_fairshare(shares, usage)


def test_worked_example_of_the_module() -> None:
    levels = level_fairshare({"A": 0.75, "B": 0.25, "C": 0.0}, {"A": 30.0, "B": 10.0})
    assert levels == {"A": 1.0, "B": 1.0, "C": math.inf}
    assert dense_ranks(levels) == {"C": 0, "A": 1, "B": 1}


def test_ranks_are_dense_and_ties_share_a_rank() -> None:
    assert dense_ranks({"a": 3.0, "b": 1.0, "c": 3.0, "d": 0.5, "e": math.inf}) == {
        "e": 0,
        "a": 1,
        "c": 1,
        "b": 2,
        "d": 3,
    }


def test_ranks_stop_at_nine() -> None:
    ranks = dense_ranks({f"org{i}": float(100 - i) for i in range(15)})
    assert [ranks[f"org{i}"] for i in range(15)] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 9, 9, 9]
    assert MAX_RANK == 9


def test_nan_levels_are_refused() -> None:
    with pytest.raises(ValueError):
        dense_ranks({"a": math.nan})


levels_strategy = st.dictionaries(
    st.text(min_size=1, max_size=4),
    st.one_of(st.just(math.inf), st.sampled_from([0.0, 0.5, 1.0, 2.0]), st.floats(0, 1e6)),
    max_size=20,
)


@settings(max_examples=300, deadline=None)
@given(levels_strategy)
def test_ranks_are_dense_capped_and_follow_the_level(levels: dict[str, float]) -> None:
    ranks = dense_ranks(levels)
    assert set(ranks) == set(levels)
    used = sorted(set(ranks.values()))
    assert used == list(range(len(used)))  # dense: no rank is skipped
    assert all(0 <= r <= MAX_RANK for r in used)
    for a in levels:
        for b in levels:
            if levels[a] > levels[b]:
                assert ranks[a] <= ranks[b]
                if ranks[b] < MAX_RANK:
                    assert ranks[a] < ranks[b]
            if levels[a] == levels[b]:
                assert ranks[a] == ranks[b]
    if levels:
        assert min(ranks.values()) == 0
