"""Token usage as the engine reports it, or as the gateway estimates it when the engine did not.

Engines report usage in four shapes: chat/completions (``prompt_tokens``,
``completion_tokens``, ``prompt_tokens_details.cached_tokens``), embeddings
(``prompt_tokens`` only), the Responses API (``input_tokens``,
``output_tokens``, ``input_tokens_details.cached_tokens``) and llama-server's
native answers (``tokens_evaluated``, ``tokens_predicted``, ``timings.cache_n``;
one result per prompt). When none arrived (a client abort, a broken stream, an
engine that sends no usage, a report whose counts are not integers from 0 to
2³¹ − 1) the request is charged its reservation instead (``proxy.reservation``),
flagged ``estimated``: never a lower guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

__all__ = ["Usage", "llama_usage", "usage_from", "usage_in_body"]


# built on every request: slotted, not frozen (docs/architecture.md, "Value types")
@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    estimated: bool = False

    def at_least(self, other: Usage) -> Usage:
        """A later report ``other`` of the same request, never below this one: the larger
        prompt and output counts of the two, the later cached count. Running counts only
        grow, so an engine's report smaller than an earlier one (a second usage chunk,
        one after ``[DONE]``) cannot lower what the request is charged."""
        if other.prompt_tokens >= self.prompt_tokens and (
            other.completion_tokens >= self.completion_tokens
        ):
            return other  # the common case: the later report is the larger
        return Usage(
            max(self.prompt_tokens, other.prompt_tokens),
            max(self.completion_tokens, other.completion_tokens),
            other.cached_tokens,
            self.estimated or other.estimated,
        )

    def plus(self, other: Usage) -> Usage:
        """Both usages together (flagged estimated when either is)."""
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cached_tokens + other.cached_tokens,
            self.estimated or other.estimated,
        )


_MAX_COUNT = 2**31 - 1
"""The largest token count read as one: past any model's context (``engines.output``)."""


def _int(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


def _count(value: Any) -> int | None:
    """A prompt or output count: absent is 0; anything but an integer from 0 to
    ``_MAX_COUNT`` (a negative, a float, ``1e30``, a string) is None, no count at all."""
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_COUNT:
        return value
    return None


def _usage(prompt: Any, output: Any, cached: Any) -> Usage | None:
    """None when either count cannot be read: a report the gateway cannot trust is no
    report (the reservation, never a lower guess). A cached count that cannot be read is
    none cached, which only raises the price."""
    prompt_tokens, output_tokens = _count(prompt), _count(output)
    if prompt_tokens is None or output_tokens is None:
        return None
    return Usage(prompt_tokens, output_tokens, min(_int(cached), _MAX_COUNT))


def usage_from(block: Any) -> Usage | None:
    """A Usage from an engine's ``usage`` object, or None when it is not one (or its
    counts cannot be read)."""
    if not isinstance(block, dict):
        return None
    if "input_tokens" in block or "output_tokens" in block:
        details = block.get("input_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else 0
        return _usage(block.get("input_tokens"), block.get("output_tokens"), cached)
    if "prompt_tokens" not in block:
        return None
    details = block.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else 0
    return _usage(block.get("prompt_tokens"), block.get("completion_tokens"), cached)


def llama_usage(result: Any) -> Usage | None:
    """A Usage from one llama-server native result (or its closing stream event), or None
    when it carries no ``tokens_predicted`` (or its counts cannot be read)."""
    if not isinstance(result, dict) or "tokens_predicted" not in result:
        return None
    timings = result.get("timings")
    cached = timings.get("cache_n") if isinstance(timings, dict) else 0
    return _usage(result.get("tokens_evaluated"), result.get("tokens_predicted"), cached)


def _llama_answer(body: bytes) -> Usage | None:
    """The usage of a native llama-server answer: one result, or a list of them (one per
    prompt); None unless every result reports its tokens."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    results = parsed if isinstance(parsed, list) else [parsed]
    total: Usage | None = None
    for result in results:
        usage = llama_usage(result)
        if usage is None:
            return None
        total = usage if total is None else total.plus(usage)
    return total


def usage_in_body(body: bytes) -> Usage | None:
    """The usage of a whole JSON answer, parsing only its ``usage`` object.

    Engines put ``usage`` last; an embeddings answer can be megabytes of vectors
    before it, so the object is cut out (it holds only numbers and small nested
    objects, no strings with braces) and parsed alone. Falls back to parsing the
    whole body when the cut does not parse.
    """
    at = body.rfind(b'"usage"')
    if at < 0:
        return _llama_answer(body) if b'"tokens_predicted"' in body else None
    start = body.find(b"{", at)
    if start >= 0 and not body[at + 7 : start].strip(b" \t\r\n:"):
        # The object ends at the first '}' with as many '{' before it (from ``start``)
        # as '}': found by the bytes' own searches, a step per nested object, instead
        # of a Python step per byte (the whole usage object, every request).
        limit = min(len(body), start + 4096)
        end = body.find(b"}", start, limit)
        while end >= 0:
            if body.count(b"{", start, end) == body.count(b"}", start, end + 1):
                try:
                    return usage_from(orjson.loads(body[start : end + 1]))
                except orjson.JSONDecodeError:
                    break
            end = body.find(b"}", end + 1, limit)
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return usage_from(parsed.get("usage")) if isinstance(parsed, dict) else None
