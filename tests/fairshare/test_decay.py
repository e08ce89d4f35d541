"""Exponential decay with a half-life, and the (value, at) usage record."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairgate.core.money import Money
from fairgate.fairshare.decay import DEFAULT_HALF_LIFE, DecayedUsage, decay

WEEK = 168 * 3600.0


def test_one_half_life_halves_and_two_quarter() -> None:
    assert decay(8.0, WEEK, WEEK) == pytest.approx(4.0, rel=1e-15)
    assert decay(8.0, 2 * WEEK, WEEK) == pytest.approx(2.0, rel=1e-15)
    assert decay(8.0, 0.0, WEEK) == 8.0
    assert DEFAULT_HALF_LIFE == WEEK


def test_it_is_the_exact_exponential_not_slurms_first_order_factor() -> None:
    # One day with a one-week half-life: 2^(-1/7).
    assert decay(1.0, 24 * 3600.0, WEEK) == pytest.approx(2 ** (-1 / 7), rel=1e-14)


def test_an_infinite_half_life_keeps_everything() -> None:
    assert decay(5.0, 1e12, math.inf) == 5.0


@pytest.mark.parametrize(("dt", "half_life"), [(-1.0, WEEK), (1.0, 0.0), (1.0, -WEEK)])
def test_negative_time_or_non_positive_half_life_is_refused(dt: float, half_life: float) -> None:
    with pytest.raises(ValueError):
        decay(1.0, dt, half_life)


finite = st.floats(min_value=0, max_value=1e7, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(
    st.floats(min_value=0, max_value=1e9, allow_nan=False),
    finite,
    finite,
    st.floats(min_value=1, max_value=1e7),
)
def test_decay_composes(value: float, a: float, b: float, half_life: float) -> None:
    # Bringing usage up to date twice equals doing it once: exact up to float rounding.
    once = decay(value, a + b, half_life)
    twice = decay(decay(value, a, half_life), b, half_life)
    assert math.isclose(twice, once, rel_tol=1e-9, abs_tol=1e-300)


def test_a_charge_adds_to_the_decayed_value() -> None:
    usage = DecayedUsage(half_life=WEEK).charged(10.0, now=1000.0)
    assert (usage.value, usage.at) == (10.0, 1000.0)
    later = usage.charged(4.0, now=1000.0 + WEEK)
    assert later.value == pytest.approx(5.0 + 4.0)
    assert later.at == 1000.0 + WEEK
    assert later.value_at(1000.0 + 2 * WEEK) == pytest.approx(4.5)
    assert usage.value == 10.0  # the record is immutable; charging made a new one


def test_money_is_charged_in_units() -> None:
    usage = DecayedUsage().charged(Money(250_000), now=0.0)
    assert usage.value == 0.25


def test_a_clock_behind_the_record_neither_grows_nor_rewinds_it() -> None:
    usage = DecayedUsage(8.0, at=100.0, half_life=10.0)
    assert usage.value_at(50.0) == 8.0
    charged = usage.charged(1.0, now=50.0)
    assert charged.at == 100.0
    assert charged.value == 9.0


@pytest.mark.parametrize("amount", [-1.0, math.nan, math.inf])
def test_invalid_charges_are_refused(amount: float) -> None:
    with pytest.raises(ValueError):
        DecayedUsage().charged(amount, now=0.0)


def test_invalid_records_are_refused() -> None:
    with pytest.raises(ValueError):
        DecayedUsage(-1.0)
    with pytest.raises(ValueError):
        DecayedUsage(1.0, 0.0, half_life=0.0)
