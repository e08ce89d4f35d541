"""Server-sent events, cut at event boundaries so they can be relayed one by one.

The relay never forwards half an event: bytes from the engine are buffered
until a blank line ends the event, then the event is classified:

- ``done``     ``data: [DONE]`` (chat and completions streams end with it)
- ``usage``    a chunk with a ``usage`` object and no choices (``include_usage``)
- ``error``    a ``data: {"error": …}`` event (vLLM reports mid-stream failures so)
- ``final``    the Responses API's ``response.completed`` / ``.incomplete`` / ``.failed``,
               or llama-server's native ``"stop": true`` event (its streams have no ``[DONE]``;
               each prompt of a batch ends with one, and their usages add up: ``adds``)
- ``content``  everything else (counted for the usage estimate)

Classification looks at bytes first and parses JSON only for the few events that
can carry usage or an error, so a token event costs a few substring checks. A chunk
that holds whole events and none of the markers above (``SseSplitter.content``) is
content through and through: it is counted and relayed as it came, never split.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from fairgate.proxy.usage import Usage, llama_usage, usage_from

__all__ = ["SseEvent", "SseSplitter", "classify", "error_event"]

_SEPARATORS = (b"\n\n", b"\r\n\r\n")
_FINAL = (b'"response.completed"', b'"response.incomplete"', b'"response.failed"')
_LLAMA_STOP = b'"stop":true'


@dataclass(slots=True)
class SseEvent:
    raw: bytes  # the event including its terminating blank line
    kind: str  # done | usage | error | final | content
    usage: Usage | None = None
    # one sequence's end (llama-server): its usage adds to the others', and the stream
    # ends with the last sequence's
    adds: bool = False


class SseSplitter:
    """Feeds bytes in, yields whole events out; holds at most one partial event.

    ``max_event_bytes`` bounds the partial event: an engine that sends an endless
    line cannot make the gateway buffer without limit (``ValueError``).
    """

    def __init__(self, max_event_bytes: int = 1 << 20) -> None:
        self._buffer = b""
        self._max = max_event_bytes

    def feed(self, chunk: bytes) -> list[bytes]:
        data = self._buffer + chunk if self._buffer else chunk
        events: list[bytes] = []
        start = 0
        while True:
            end, sep = _next_boundary(data, start)
            if end < 0:
                break
            events.append(data[start : end + sep])
            start = end + sep
        self._buffer = data[start:]
        if len(self._buffer) > self._max:
            raise ValueError("an SSE event exceeded the size limit")
        return events

    def content(self, chunk: bytes) -> int:
        """How many events ``chunk`` holds when ``feed`` would split it into whole events
        that ``classify`` finds all ``content`` and keep nothing pending; else -1 (and
        nothing fed: the caller feeds it). Only ``\n\n`` ends events here: a chunk that
        ends in more newlines than two, or holds a ``\r``, is left to ``feed``."""
        if (
            self._buffer
            or not chunk.endswith(b"\n\n")
            or chunk.endswith(b"\n\n\n")
            or b"\r" in chunk
            # what every kind but content needs in its event (``classify``);
            # ``"response.`` covers the three ``_FINAL`` markers
            or b"[DONE]" in chunk
            or b'"usage"' in chunk
            or b'"response.' in chunk
            or b'"stop":true' in chunk
            or b'"error"' in chunk
        ):
            return -1
        return chunk.count(b"\n\n")

    def pending(self) -> bytes:
        return self._buffer


def _next_boundary(data: bytes, start: int) -> tuple[int, int]:
    best, size = -1, 0
    for sep in _SEPARATORS:
        at = data.find(sep, start)
        if at >= 0 and (best < 0 or at < best):
            best, size = at, len(sep)
    return best, size


def _data_of(raw: bytes) -> bytes:
    parts = [line[5:].lstrip(b" ") for line in raw.splitlines() if line.startswith(b"data:")]
    return b"\n".join(parts)


def _parse(raw: bytes) -> Any:
    try:
        return orjson.loads(_data_of(raw))
    except orjson.JSONDecodeError:
        return None


def classify(raw: bytes) -> SseEvent:
    """The kind of one whole event (see the module docstring)."""
    if b"[DONE]" in raw and _data_of(raw).strip() == b"[DONE]":
        return SseEvent(raw, "done")
    if b'"usage"' in raw and b'"usage":null' not in raw and b'"usage": null' not in raw:
        body = _parse(raw)
        if isinstance(body, dict):
            if any(marker in raw for marker in _FINAL):
                response = body.get("response")
                usage = usage_from(response.get("usage")) if isinstance(response, dict) else None
                return SseEvent(raw, "final", usage)
            usage = usage_from(body.get("usage"))
            if usage is not None:
                choices = body.get("choices")
                kind = "usage" if not choices else "content"
                return SseEvent(raw, kind, usage)
    if any(marker in raw for marker in _FINAL):
        return SseEvent(raw, "final")
    if _LLAMA_STOP in raw:
        body = _parse(raw)
        if isinstance(body, dict) and body.get("stop") is True:
            return SseEvent(raw, "final", llama_usage(body), adds=True)
    if b'"error"' in raw:
        body = _parse(raw)
        if isinstance(body, dict) and isinstance(body.get("error"), dict | str):
            return SseEvent(raw, "error")
    return SseEvent(raw, "content")


def error_event(message: str, type_: str = "upstream_error", code: str | None = None) -> bytes:
    """An SSE event carrying an OpenAI error envelope, sent when a stream breaks off."""
    payload = orjson.dumps({"error": {"message": message, "type": type_, "code": code}})
    return b"data: " + payload + b"\n\n"
