"""``/v1/responses``: one assistant message, whole or as the Responses API event stream.

The stream is ``response.created``, ``response.in_progress``,
``response.output_item.added``, ``response.content_part.added``, one
``response.output_text.delta`` per token, then the ``.done`` events and
``response.completed`` (or ``response.incomplete`` when ``max_output_tokens``
cut the answer) carrying the usage. Each event has an ``event:`` line and a
``sequence_number``.
"""

from __future__ import annotations

from typing import Any

import orjson

from fairgate.sim.output import Usage, new_id, now_seconds, sse

__all__ = ["ResponsesFormat"]


class ResponsesFormat:
    """Responses API bodies and events for one request (``max_output_tokens`` as asked)."""

    media_type = b"text/event-stream; charset=utf-8"

    def __init__(self, model: str, max_output_tokens: int | None) -> None:
        self.id = new_id("resp_")
        self.item_id = new_id("msg_")
        self.created = now_seconds()
        self.model = model
        self.max_output_tokens = max_output_tokens
        self._seq = 0

    def whole(self, text: str, usage: Usage, finish: str) -> bytes:
        return orjson.dumps(self._response(text, usage, finish))

    def token(self, piece: str, index: int, finish: str | None) -> bytes:
        out = b""
        if index == 0:
            pending = self._response(None, None, None)
            out += self._event("response.created", response=pending)
            out += self._event("response.in_progress", response=pending)
            out += self._event("response.output_item.added", output_index=0, item=self._item(None))
            out += self._event(
                "response.content_part.added",
                item_id=self.item_id,
                output_index=0,
                content_index=0,
                part=_part(""),
            )
        return out + self._event(
            "response.output_text.delta",
            item_id=self.item_id,
            output_index=0,
            content_index=0,
            delta=piece,
            logprobs=[],
        )

    def closing(self, text: str, usage: Usage, finish: str, include_usage: bool) -> bytes:
        where = {"item_id": self.item_id, "output_index": 0, "content_index": 0}
        final = self._response(text, usage, finish)
        done = "response.completed" if final["status"] == "completed" else "response.incomplete"
        return (
            self._event("response.output_text.done", **where, text=text, logprobs=[])
            + self._event("response.content_part.done", **where, part=_part(text))
            + self._event("response.output_item.done", output_index=0, item=self._item(text))
            + self._event(done, response=final)
        )

    def _event(self, kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return sse(payload, event=kind)

    def _item(self, text: str | None) -> dict[str, Any]:
        return {
            "id": self.item_id,
            "type": "message",
            "status": "in_progress" if text is None else "completed",
            "role": "assistant",
            "content": [] if text is None else [_part(text)],
        }

    def _response(
        self, text: str | None, usage: Usage | None, finish: str | None
    ) -> dict[str, Any]:
        cut = finish == "length" and self.max_output_tokens is not None
        status = "in_progress" if text is None else ("incomplete" if cut else "completed")
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "model": self.model,
            "output": [] if text is None else [self._item(text)],
            "usage": None if usage is None else _usage(usage),
            "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
            "error": None,
            "instructions": None,
            "max_output_tokens": self.max_output_tokens,
            "metadata": {},
            "parallel_tool_calls": True,
            "previous_response_id": None,
            "reasoning": None,
            "temperature": 1.0,
            "text": {"format": {"type": "text"}},
            "tool_choice": "auto",
            "tools": [],
            "top_p": 1.0,
            "truncation": "disabled",
        }


def _part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _usage(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.prompt,
        "input_tokens_details": {"cached_tokens": usage.cached},
        "output_tokens": usage.completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.prompt + usage.completion,
    }
