"""Reading and checking the client's request before anything is sent upstream.

The body is read once, bounded by ``max_body_bytes`` and by a deadline (a
client trickling its body is cut off), parsed once with orjson, and checked
against the caps an operator sets (``n``, ``best_of``, grammar size; the output
cap is the reservation's, ``proxy.reservation``).
Every refusal here is a 4xx in the OpenAI envelope, never a 422.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import orjson

from fairgate.core.asgi import Receive
from fairgate.core.errors import BadRequest, PayloadTooLarge

__all__ = ["Caps", "ClientGone", "check_caps", "parse_json", "read_body"]

# Fields whose value is a grammar, a schema or a pattern the engine compiles:
# their size is capped because compiling them costs the engine, not the gateway.
_GRAMMAR_FIELDS = (
    "grammar",
    "guided_grammar",
    "guided_regex",
    "guided_json",
    "guided_choice",
    "json_schema",
    "structured_outputs",
    "response_format",
    "regex",
)
_COUNTS = ("n", "best_of", "n_cmpl")  # n_cmpl: llama-server's own name for n, read before it
_CAPPED = frozenset((*_COUNTS, *_GRAMMAR_FIELDS))  # a body with none of them: only "stream"


class ClientGone(Exception):
    """The client disconnected before its request was read."""


@dataclass(frozen=True, slots=True)
class Caps:
    max_body_bytes: int
    body_timeout: float
    max_n: int
    max_grammar_bytes: int


async def read_body(receive: Receive, declared: int | None, caps: Caps) -> bytes:
    """The whole request body, or PayloadTooLarge / BadRequest / ClientGone."""
    limit = caps.max_body_bytes
    if declared is not None and declared > limit:
        raise PayloadTooLarge(f"request body is larger than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(caps.body_timeout):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise ClientGone()
                body: bytes = message.get("body", b"")
                size += len(body)
                if size > limit:
                    raise PayloadTooLarge(f"request body is larger than {limit} bytes")
                if not message.get("more_body", False):
                    if not chunks:
                        return body
                    chunks.append(body)
                    return b"".join(chunks)
                chunks.append(body)
    except TimeoutError:
        raise BadRequest("the request body was not received in time", code="body_timeout") from None


def parse_json(body: bytes) -> dict[str, Any]:
    """The body as a JSON object, or BadRequest saying why not."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise BadRequest("request body is not valid JSON", code="invalid_json") from None
    if not isinstance(parsed, dict):
        raise BadRequest("request body must be a JSON object", code="invalid_json")
    return parsed


def check_caps(parsed: dict[str, Any], caps: Caps) -> None:
    """Refuse values the operator capped; the message names the field and the cap."""
    if _CAPPED.isdisjoint(parsed):
        # the common body: nothing capped in it, so only "stream" can be refused
        if "stream" in parsed:
            _check_stream(parsed["stream"])
        return
    for field in _COUNTS:
        n = parsed.get(field)
        if n is None:
            continue
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise BadRequest(f"'{field}' must be a positive integer", code="invalid_value")
        if n > caps.max_n:
            raise BadRequest(f"'{field}' must be at most {caps.max_n}", code="n_too_large")
    _check_stream(parsed.get("stream"))
    for field in _GRAMMAR_FIELDS:
        value = parsed.get(field)
        if value is None:
            continue
        size = len(value) if isinstance(value, str) else len(orjson.dumps(value))
        if size > caps.max_grammar_bytes:
            raise BadRequest(
                f"'{field}' is larger than {caps.max_grammar_bytes} bytes", code="grammar_too_large"
            )


def _check_stream(stream: Any) -> None:
    if stream is not None and stream is not True and stream is not False:
        raise BadRequest("'stream' must be true or false", code="invalid_value")
