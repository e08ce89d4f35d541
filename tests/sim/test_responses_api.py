"""Responses API bodies and the order of its stream events."""

from __future__ import annotations

import orjson

from fairgate.sim.output import Usage
from fairgate.sim.responses_api import ResponsesFormat

USAGE = Usage(prompt=8, completion=2, cached=0)


def _events(data: bytes) -> list[dict[str, object]]:
    out = []
    for block in (b for b in data.split(b"\n\n") if b):
        event_line, data_line = block.split(b"\n")
        payload = orjson.loads(data_line.removeprefix(b"data: "))
        assert event_line == b"event: " + payload["type"].encode()
        out.append(payload)
    return out


def test_stream_events_in_order_with_usage_at_the_end() -> None:
    fmt = ResponsesFormat("m", None)
    data = fmt.token("a", 0, None) + fmt.token(" b", 1, "stop")
    data += fmt.closing("a b", USAGE, "stop", include_usage=False)
    events = _events(data)
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(10))
    final = events[-1]["response"]
    assert isinstance(final, dict)
    assert final["status"] == "completed"
    assert final["usage"]["output_tokens"] == 2 and final["usage"]["input_tokens"] == 8
    assert final["output"][0]["content"][0]["text"] == "a b"


def test_a_cut_answer_is_incomplete() -> None:
    fmt = ResponsesFormat("m", 2)
    body = orjson.loads(fmt.whole("a b", USAGE, "length"))
    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    events = _events(fmt.closing("a b", USAGE, "length", include_usage=False))
    assert events[-1]["type"] == "response.incomplete"
