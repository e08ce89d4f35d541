"""Token usage as the engine reports it, or as the gateway estimates it when the engine did not.

Engines report usage in three shapes: chat/completions (``prompt_tokens``,
``completion_tokens``, ``prompt_tokens_details.cached_tokens``), embeddings
(``prompt_tokens`` only) and the Responses API (``input_tokens``,
``output_tokens``, ``input_tokens_details.cached_tokens``). An estimate is used
when none arrived (a client abort, an engine that does not send usage on a
stream): prompt bytes / 4 plus one token per content event relayed, flagged
``estimated`` so reports can tell it from a measured figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Usage", "estimate_usage", "usage_from"]


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    estimated: bool = False


def _int(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


def usage_from(block: Any) -> Usage | None:
    """A Usage from an engine's ``usage`` object, or None when it is not one."""
    if not isinstance(block, dict):
        return None
    if "input_tokens" in block or "output_tokens" in block:
        details = block.get("input_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else 0
        return Usage(
            _int(block.get("input_tokens")), _int(block.get("output_tokens")), _int(cached)
        )
    if "prompt_tokens" not in block:
        return None
    details = block.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else 0
    return Usage(
        _int(block.get("prompt_tokens")), _int(block.get("completion_tokens")), _int(cached)
    )


def estimate_usage(prompt_bytes: int, content_events: int) -> Usage:
    """The flagged estimate: prompt bytes / 4 (rounded up) and one token per content event."""
    return Usage(-(-prompt_bytes // 4), content_events, 0, estimated=True)
