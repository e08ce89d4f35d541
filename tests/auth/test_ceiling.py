"""The lookup ceiling: lookups of unknown credentials per sliding minute, half for failing ones."""

from __future__ import annotations

import pytest

from fairgate.auth import LookupCeiling, Slot

from .conftest import ManualClock


def take(ceiling: LookupCeiling, times: int, *, restricted: bool) -> list[Slot | float]:
    return [ceiling.take(restricted=restricted) for _ in range(times)]


def test_restricted_networks_get_half_and_the_others_the_rest(clock: ManualClock) -> None:
    ceiling = LookupCeiling(10, clock)
    assert all(isinstance(t, Slot) for t in take(ceiling, 5, restricted=True))
    refused = ceiling.take(restricted=True)
    assert isinstance(refused, float) and 0 < refused <= 120
    assert all(isinstance(t, Slot) for t in take(ceiling, 5, restricted=False))
    assert isinstance(ceiling.take(restricted=False), float)


def test_a_slot_given_back_is_free_again(clock: ManualClock) -> None:
    ceiling = LookupCeiling(2, clock)
    first, second = take(ceiling, 2, restricted=False)
    assert isinstance(first, Slot) and isinstance(second, Slot)
    assert isinstance(ceiling.take(restricted=False), float)
    ceiling.give_back(first)
    assert isinstance(ceiling.take(restricted=False), Slot)


def test_the_wait_is_when_a_slot_frees_up(clock: ManualClock) -> None:
    ceiling = LookupCeiling(60, clock)
    clock.advance(30)
    take(ceiling, 60, restricted=False)
    wait = ceiling.take(restricted=False)
    assert isinstance(wait, float)
    clock.advance(wait - 0.5)
    assert isinstance(ceiling.take(restricted=False), float)
    clock.advance(1.0)
    assert isinstance(ceiling.take(restricted=False), Slot)


def test_zero_is_no_ceiling(clock: ManualClock) -> None:
    ceiling = LookupCeiling(0, clock)
    assert all(isinstance(t, Slot) for t in take(ceiling, 10_000, restricted=True))


def test_a_negative_ceiling_is_refused(clock: ManualClock) -> None:
    with pytest.raises(ValueError):
        LookupCeiling(-1, clock)
