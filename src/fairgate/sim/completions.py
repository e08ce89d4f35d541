"""Chat and text completion bodies and chunks, in vLLM's OpenAI-compatible shapes.

Streams carry one token per event; the last token's event carries the finish
reason; with ``stream_options.include_usage`` one more event with empty
``choices`` carries the usage, and with ``continuous_usage_stats`` too every token's
event carries the usage so far (``with_usage``); ``data: [DONE]`` ends the stream. The
per-token event is two precomputed byte strings around the JSON-encoded piece.
"""

from __future__ import annotations

from typing import Any

import orjson

from fairgate.sim.output import Usage, new_id, now_seconds, sse

__all__ = ["ChatFormat", "CompletionFormat", "with_usage"]

_DONE = b"data: [DONE]\n\n"


def with_usage(event: bytes, usage: Usage) -> bytes:
    """A token's event (the last of the first token's two) with the usage so far in it,
    as vLLM sends it under ``stream_options.continuous_usage_stats``."""
    return event[: event.rindex(b"}")] + b',"usage":' + orjson.dumps(usage.openai()) + b"}\n\n"


class _StreamFormat:
    media_type = b"text/event-stream; charset=utf-8"
    _object: str
    _prefix: str
    _open: bytes  # JSON between the choice's index and the piece
    _close: bytes  # JSON that closes what _open opened

    def __init__(self, model: str) -> None:
        self.id = new_id(self._prefix)
        self.created = now_seconds()
        self.model = model
        self._head = {
            "id": self.id,
            "object": self._object,
            "created": self.created,
            "model": model,
        }
        self._before = b""
        self._after = self._close + b',"logprobs":null,"finish_reason":null}]}\n\n'

    def _choice(self, piece: str, finish: str | None) -> dict[str, Any]:
        """One event's choice object; the chat and the completion streams define it."""
        raise NotImplementedError

    def _event(self, piece: str, finish: str | None) -> bytes:
        if finish is None:
            if not self._before:
                # Everything before the piece, built once per stream, so a token
                # costs one small dumps.
                opening = orjson.dumps(self._head)[:-1] + b',"choices":[{"index":0,'
                self._before = b"data: " + opening + self._open
            return self._before + orjson.dumps(piece) + self._after
        return sse({**self._head, "choices": [self._choice(piece, finish)]})

    def closing(self, text: str, usage: Usage, finish: str, include_usage: bool) -> bytes:
        if not include_usage:
            return _DONE
        return sse({**self._head, "choices": [], "usage": usage.openai()}) + _DONE


class ChatFormat(_StreamFormat):
    """``chat.completion`` bodies and ``chat.completion.chunk`` events."""

    _object = "chat.completion.chunk"
    _prefix = "chatcmpl-"
    _open = b'"delta":{"content":'
    _close = b"}"

    def _choice(self, piece: str, finish: str | None) -> dict[str, Any]:
        return {
            "index": 0,
            "delta": {"content": piece},
            "logprobs": None,
            "finish_reason": finish,
            "stop_reason": None,
        }

    def token(self, piece: str, index: int, finish: str | None) -> bytes:
        event = self._event(piece, finish)
        if index == 0:
            role = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None}
            return sse({**self._head, "choices": [{**role, "finish_reason": None}]}) + event
        return event

    def whole(self, text: str, usage: Usage, finish: str) -> bytes:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": text,
            "refusal": None,
            "tool_calls": [],
        }
        return orjson.dumps(
            {
                "id": self.id,
                "object": "chat.completion",
                "created": self.created,
                "model": self.model,
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "logprobs": None,
                        "finish_reason": finish,
                        "stop_reason": None,
                    }
                ],
                "usage": usage.openai(),
                "system_fingerprint": None,
                "prompt_logprobs": None,
            }
        )


class CompletionFormat(_StreamFormat):
    """``text_completion`` bodies and stream events."""

    _object = "text_completion"
    _prefix = "cmpl-"
    _open = b'"text":'
    _close = b""

    def _choice(self, piece: str, finish: str | None) -> dict[str, Any]:
        return {
            "index": 0,
            "text": piece,
            "logprobs": None,
            "finish_reason": finish,
            "stop_reason": None,
        }

    def token(self, piece: str, index: int, finish: str | None) -> bytes:
        return self._event(piece, finish)

    def whole(self, text: str, usage: Usage, finish: str) -> bytes:
        return orjson.dumps(
            {
                "id": self.id,
                "object": "text_completion",
                "created": self.created,
                "model": self.model,
                "choices": [{**self._choice(text, finish), "prompt_logprobs": None}],
                "usage": usage.openai(),
            }
        )
