"""The token estimate a request is charged at admission, before anything has run.

    estimate_tokens(prompt_bytes=4001, max_tokens=100, default_max=256) == 1101
    estimate_tokens(prompt_bytes=400, max_tokens=None, default_max=256) == 356

The prompt counts one token per 4 bytes of request body, rounded up: a generous
figure for English text (about 4 characters per token), never below the truth by
much for JSON-wrapped messages. The completion counts ``max_tokens`` (or
``max_completion_tokens``) when the client set it; otherwise a modest assumption,
``ASSUMED_COMPLETION_TOKENS`` unless configured, because assuming zero would let
an unbounded request through every token limit. The estimate is never zero. The
real usage corrects it when the request ends.
"""

from __future__ import annotations

__all__ = ["ASSUMED_COMPLETION_TOKENS", "BYTES_PER_TOKEN", "estimate_tokens"]

BYTES_PER_TOKEN = 4
ASSUMED_COMPLETION_TOKENS = 256


def estimate_tokens(prompt_bytes: int, max_tokens: int | None, default_max: int) -> int:
    """Estimated prompt + completion tokens, at least 1.

    ``max_tokens`` is the client's cap (None or negative: absent); ``default_max``
    (>= 0) is assumed when it is absent. ``ValueError`` on a negative size.
    """
    if prompt_bytes < 0 or default_max < 0:
        raise ValueError("prompt size and default completion must not be negative")
    prompt = -(-prompt_bytes // BYTES_PER_TOKEN)
    completion = max_tokens if max_tokens is not None and max_tokens >= 0 else default_max
    return max(1, prompt + completion)
