"""The admission-time token estimate."""

from __future__ import annotations

import pytest

from fairgate.limits import ASSUMED_COMPLETION_TOKENS, estimate_tokens


def test_prompt_bytes_count_a_token_per_four_rounded_up_plus_max_tokens() -> None:
    assert estimate_tokens(4001, 100, 256) == 1001 + 100
    assert estimate_tokens(4000, 100, 256) == 1000 + 100


def test_absent_max_tokens_assumes_the_default_never_zero() -> None:
    assert estimate_tokens(400, None, ASSUMED_COMPLETION_TOKENS) == 100 + 256
    assert ASSUMED_COMPLETION_TOKENS > 0
    assert estimate_tokens(0, None, 0) == 1
    assert estimate_tokens(0, 0, 256) == 1


def test_an_explicit_zero_max_tokens_is_honoured() -> None:
    assert estimate_tokens(40, 0, 256) == 10


def test_negative_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        estimate_tokens(-1, None, 256)
    with pytest.raises(ValueError, match="negative"):
        estimate_tokens(1, None, -5)
