"""The admission-time token estimate."""

from __future__ import annotations

import pytest

from fairgate.limits import estimate_tokens, prompt_tokens


def test_prompt_bytes_count_a_token_per_four_rounded_up() -> None:
    assert prompt_tokens(4001) == 1001
    assert prompt_tokens(4000) == 1000
    assert prompt_tokens(0) == 0


def test_the_estimate_adds_the_output_bound_and_is_never_zero() -> None:
    assert estimate_tokens(1001, 100) == 1101
    assert estimate_tokens(10, 0) == 10
    assert estimate_tokens(0, 0) == 1


def test_negative_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        prompt_tokens(-1)
    with pytest.raises(ValueError, match="negative"):
        estimate_tokens(1, -5)
