"""How a finished or streaming generation is written: the contract each route's format meets."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

__all__ = ["OutputFormat", "Usage", "new_id", "now_seconds", "sse"]


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of one request; ``cached`` is the prefix-cache hit, part of ``prompt``."""

    prompt: int
    completion: int
    cached: int

    def openai(self) -> dict[str, Any]:
        """The ``usage`` block of chat and text completions."""
        return {
            "prompt_tokens": self.prompt,
            "total_tokens": self.prompt + self.completion,
            "completion_tokens": self.completion,
            "prompt_tokens_details": {"cached_tokens": self.cached},
        }


class OutputFormat(Protocol):
    """Renders one generation, either whole or as server-sent events.

    ``token`` is called once per output token in order, with ``finish`` set
    (``"length"`` or ``"stop"``) on the last one only, and returns the bytes of
    one or more complete SSE events (the first call may add a preamble, such as
    the role chunk of a chat stream). ``closing`` returns what follows the last
    token (a usage event if asked, the terminator). ``media_type`` is the
    Content-Type of the stream.
    """

    media_type: bytes

    def whole(self, text: str, usage: Usage, finish: str) -> bytes: ...

    def token(self, piece: str, index: int, finish: str | None) -> bytes: ...

    def closing(self, text: str, usage: Usage, finish: str, include_usage: bool) -> bytes: ...


def sse(payload: dict[str, Any], event: str | None = None) -> bytes:
    """One server-sent event carrying ``payload`` as JSON."""
    data = b"data: " + orjson.dumps(payload) + b"\n\n"
    return b"event: " + event.encode() + b"\n" + data if event else data


def new_id(prefix: str) -> str:
    """A fresh response id such as ``chatcmpl-<32 hex>``, as vLLM makes them."""
    return prefix + os.urandom(16).hex()


def now_seconds() -> int:
    return int(time.time())
