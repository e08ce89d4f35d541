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

import orjson

__all__ = ["Usage", "estimate_usage", "usage_from", "usage_in_body"]


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


def usage_in_body(body: bytes) -> Usage | None:
    """The usage of a whole JSON answer, parsing only its ``usage`` object.

    Engines put ``usage`` last; an embeddings answer can be megabytes of vectors
    before it, so the object is cut out (it holds only numbers and small nested
    objects, no strings with braces) and parsed alone. Falls back to parsing the
    whole body when the cut does not parse.
    """
    at = body.rfind(b'"usage"')
    if at < 0:
        return None
    start = body.find(b"{", at)
    if start >= 0 and not body[at + 7 : start].strip(b" \t\r\n:"):
        depth = 0
        for index in range(start, min(len(body), start + 4096)):
            byte = body[index]
            if byte == 0x7B:  # {
                depth += 1
            elif byte == 0x7D:  # }
                depth -= 1
                if depth == 0:
                    try:
                        return usage_from(orjson.loads(body[start : index + 1]))
                    except orjson.JSONDecodeError:
                        break
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return usage_from(parsed.get("usage")) if isinstance(parsed, dict) else None
