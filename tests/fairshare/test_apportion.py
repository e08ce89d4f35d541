"""Reservations by largest remainder: exact figures and the properties Hamilton guarantees."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairgate.fairshare.apportion import apportion

SHARES = {"A": 0.8125, "B": 0.1875}


@pytest.mark.parametrize(
    ("capacity", "shares", "expected"),
    [
        (256, SHARES, {"A": 208, "B": 48}),
        (10, SHARES, {"A": 8, "B": 2}),  # quotas 8.125 / 1.875: the seat goes to B
        (16, SHARES, {"A": 13, "B": 3}),  # 13.0 / 3.0
        (1, SHARES, {"A": 1, "B": 0}),
        (0, SHARES, {"A": 0, "B": 0}),
        (100, {"x": 0.29, "y": 0.71}, {"x": 29, "y": 71}),  # 0.29 × 100 is 28.999… in floats
        (3, {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}, {"a": 1, "b": 1, "c": 1}),
        (3, {"b": 0.5, "a": 0.5}, {"a": 2, "b": 1}),  # equal remainders: first name wins
        (10, {"A": 0.5}, {"A": 5}),  # the other half stays unreserved
        (10, {"A": 0.45, "B": 0.45}, {"A": 5, "B": 4}),  # floor(0.9 × 10) = 9 seats in all
        (7, {"A": 0.6, "B": 0.3, "C": 0.1}, {"A": 4, "B": 2, "C": 1}),  # 4.2 / 2.1 / 0.7
        (5, {"A": 1.0, "Z": 0.0}, {"A": 5, "Z": 0}),
        (5, {}, {}),
    ],
)
def test_exact_reservations(
    capacity: int, shares: dict[str, float], expected: dict[str, int]
) -> None:
    assert apportion(capacity, shares) == expected


def test_the_alabama_paradox_is_real_so_monotony_is_not_promised() -> None:
    # Populations 6 / 6 / 2: C loses a seat when the house grows from 10 to 11.
    shares = {"A": 6 / 14, "B": 6 / 14, "C": 2 / 14}
    assert apportion(10, shares) == {"A": 4, "B": 4, "C": 2}
    assert apportion(11, shares) == {"A": 5, "B": 5, "C": 1}


def test_the_result_does_not_depend_on_mapping_order() -> None:
    forward = {"a": 0.25, "b": 0.25, "c": 0.25, "d": 0.25}
    backward = dict(reversed(list(forward.items())))
    assert apportion(6, forward) == apportion(6, backward) == {"a": 2, "b": 2, "c": 1, "d": 1}


@pytest.mark.parametrize(
    ("capacity", "shares"),
    [
        (-1, SHARES),
        (10, {"A": 0.7, "B": 0.4}),
        (10, {"A": -0.1}),
        (10, {"A": math.nan}),
        (10, {"A": math.inf}),
        (10, {"A": 1.5}),
    ],
)
def test_invalid_input_is_refused(capacity: int, shares: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        apportion(capacity, shares)


def test_a_non_integer_capacity_is_refused() -> None:
    with pytest.raises(ValueError, match="capacity"):
        apportion(10.0, SHARES)  # type: ignore[arg-type]


@st.composite
def pools(draw: st.DrawFn) -> tuple[int, dict[str, float]]:
    weights = draw(st.lists(st.integers(min_value=0, max_value=1000), min_size=1, max_size=8))
    reserved = draw(st.sampled_from([1.0, 1.0, 0.9, 0.5, 0.123]))
    total = sum(weights) or 1
    shares = {f"org{i}": min(1.0, w / total * reserved) for i, w in enumerate(weights)}
    return draw(st.integers(min_value=0, max_value=5000)), shares


@settings(max_examples=300, deadline=None)
@given(pools())
def test_reservations_never_exceed_the_capacity_and_respect_the_quota(
    pool: tuple[int, dict[str, float]],
) -> None:
    capacity, shares = pool
    seats = apportion(capacity, shares)
    assert set(seats) == set(shares)
    assert sum(seats.values()) <= capacity
    # Exactly the whole seats of the summed quota are handed out (up to float slack).
    total = sum(shares.values()) * capacity
    assert math.floor(total - 1e-6) <= sum(seats.values()) <= math.floor(total + 1e-6)
    for org, share in shares.items():
        quota = share * capacity
        assert math.floor(quota - 1e-6) <= seats[org] <= math.ceil(quota + 1e-6)


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=1, max_value=999), st.integers(min_value=0, max_value=3000))
def test_two_organisations_sharing_everything_are_house_monotone(
    thousandths: int, capacity: int
) -> None:
    shares = {"A": thousandths / 1000, "B": (1000 - thousandths) / 1000}
    now, grown = apportion(capacity, shares), apportion(capacity + 1, shares)
    assert grown["A"] >= now["A"]
    assert grown["B"] >= now["B"]
    assert now["A"] + now["B"] == capacity
