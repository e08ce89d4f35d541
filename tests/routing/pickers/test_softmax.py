"""softmax: draws in proportion to exp(total / temperature)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from fairgate.routing.pickers.softmax import SoftmaxPicker

from ..replicas import replica

SCORED = [(replica("low"), 0.2), (replica("mid"), 0.5), (replica("high"), 0.8)]


def _counts(temperature: float) -> Counter[str]:
    rng = random.Random(11)
    picker = SoftmaxPicker(temperature)
    return Counter(picker.pick(SCORED, rng, 0).replica.name for _ in range(3000))  # type: ignore[union-attr]


def test_a_low_temperature_almost_always_takes_the_best() -> None:
    assert _counts(0.02)["high"] > 2950


def test_a_high_temperature_is_close_to_uniform() -> None:
    counts = _counts(100.0)
    assert all(900 < counts[n] < 1100 for n in ("low", "mid", "high"))


def test_frequencies_follow_the_scores() -> None:
    counts = _counts(0.2)
    assert counts["high"] > counts["mid"] > counts["low"] > 0


def test_invalid_temperature_is_refused() -> None:
    with pytest.raises(ValueError):
        SoftmaxPicker(0.0)
