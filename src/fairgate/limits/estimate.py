"""The token estimate a request is charged at admission, before anything has run.

    prompt_tokens(4001) == 1001
    estimate_tokens(1001, 100) == 1101

The prompt counts one token per 4 bytes of request body, rounded up: a generous
figure for English text (about 4 characters per token), never below the truth by
much for JSON-wrapped messages; the engine's report replaces it when the request
ends. The completion is the request's output bound, decided by the proxy from
the body and the model's caps (``fairgate.engines.output``): an upper bound, not
a guess. The estimate is never zero.
"""

from __future__ import annotations

__all__ = ["BYTES_PER_TOKEN", "estimate_tokens", "prompt_tokens"]

BYTES_PER_TOKEN = 4


def prompt_tokens(prompt_bytes: int) -> int:
    """The prompt's estimated tokens: ``prompt_bytes`` / 4, rounded up.
    ``ValueError`` on a negative size."""
    if prompt_bytes < 0:
        raise ValueError("the prompt size must not be negative")
    return -(-prompt_bytes // BYTES_PER_TOKEN)


def estimate_tokens(prompt: int, completion: int) -> int:
    """Prompt and completion tokens together, at least 1. ``ValueError`` when negative."""
    if prompt < 0 or completion < 0:
        raise ValueError("token counts must not be negative")
    return max(1, prompt + completion)
