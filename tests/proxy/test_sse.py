"""The SSE splitter and classifier: events cut whole, usage found, stripping decided."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairgate.proxy.sse import SseSplitter, classify, error_event


def chunk(payload: dict) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def test_events_are_cut_whole_whatever_the_chunking() -> None:
    stream = (
        chunk({"choices": [{"delta": {"content": "a"}}]})
        + chunk({"choices": [{"delta": {"content": "b"}}]})
        + b"data: [DONE]\n\n"
    )
    for size in (1, 2, 7, 64, len(stream)):
        splitter = SseSplitter()
        events: list[bytes] = []
        for i in range(0, len(stream), size):
            events.extend(splitter.feed(stream[i : i + size]))
        assert b"".join(events) == stream
        assert len(events) == 3
        assert splitter.pending() == b""


def test_crlf_separated_events_are_recognised() -> None:
    splitter = SseSplitter()
    events = splitter.feed(b"data: {}\r\n\r\ndata: [DONE]\r\n\r\n")
    assert len(events) == 2
    assert classify(events[1]).kind == "done"


def test_an_endless_event_is_refused() -> None:
    splitter = SseSplitter(max_event_bytes=100)
    with pytest.raises(ValueError):
        splitter.feed(b"data: " + b"x" * 200)


def test_usage_chunk_is_classified_with_its_figures() -> None:
    event = classify(
        chunk(
            {
                "choices": [],
                "usage": {
                    "prompt_tokens": 12,
                    "completion_tokens": 5,
                    "prompt_tokens_details": {"cached_tokens": 8},
                },
            }
        )
    )
    assert event.kind == "usage"
    assert event.usage is not None
    assert (
        event.usage.prompt_tokens,
        event.usage.completion_tokens,
        event.usage.cached_tokens,
    ) == (12, 5, 8)


def test_content_chunk_with_null_usage_is_content() -> None:
    event = classify(chunk({"choices": [{"delta": {"content": "x"}}], "usage": None}))
    assert event.kind == "content"
    assert event.usage is None


def test_responses_api_completion_carries_usage() -> None:
    raw = (
        b"event: response.completed\ndata: "
        + orjson.dumps(
            {
                "type": "response.completed",
                "response": {
                    "usage": {
                        "input_tokens": 3,
                        "output_tokens": 4,
                        "input_tokens_details": {"cached_tokens": 0},
                    }
                },
            }
        )
        + b"\n\n"
    )
    event = classify(raw)
    assert event.kind == "final"
    assert event.usage is not None and event.usage.completion_tokens == 4


def test_engine_error_event_is_recognised() -> None:
    assert classify(chunk({"error": {"message": "boom"}})).kind == "error"
    assert classify(error_event("broken")).kind == "error"


def test_done_inside_content_is_not_done() -> None:
    assert classify(chunk({"choices": [{"delta": {"content": "[DONE]"}}]})).kind == "content"


def test_a_native_llama_stop_event_carries_usage_that_adds_up() -> None:
    raw = b'data: {"content":"","stop":true,"tokens_predicted":9,"tokens_evaluated":4}\n\n'
    event = classify(raw)
    assert event.kind == "final"
    assert event.usage is not None and event.adds
    assert (event.usage.prompt_tokens, event.usage.completion_tokens) == (4, 9)
    partial = classify(b'data: {"content":"x","stop":false,"tokens_predicted":3}\n\n')
    assert partial.kind == "content" and partial.usage is None


def test_a_chunk_of_token_events_is_counted_whole_without_splitting() -> None:
    tokens = chunk({"choices": [{"delta": {"content": "a"}}]}) * 3
    splitter = SseSplitter()
    assert splitter.content(tokens) == 3
    assert splitter.pending() == b""


@pytest.mark.parametrize(
    "data",
    [
        chunk({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}}),
        b"data: [DONE]\n\n",
        chunk({"error": {"message": "boom"}}),
        chunk({"type": "response.completed", "response": {}}),
        chunk({"content": "", "stop": True}),
        b"data: {}\r\n\r\n",
        b"data: {}\n\n\n",
        b'data: {"choices":[]}',  # no end yet: an event is left pending
    ],
)
def test_a_chunk_that_is_not_whole_content_is_left_to_feed(data: bytes) -> None:
    token = chunk({"choices": [{"delta": {"content": "a"}}]})
    assert SseSplitter().content(token + data) == -1


def test_a_chunk_is_not_counted_while_an_event_is_pending() -> None:
    splitter = SseSplitter()
    splitter.feed(b'data: {"choices"')
    assert splitter.content(b":[]}\n\n") == -1


@given(st.lists(st.sampled_from([b"data: {}", b"\n", b"\r", b"x", b"data: [DONE]", b"\n\n"])))
def test_a_counted_chunk_is_what_feed_and_classify_make_of_it(parts: list[bytes]) -> None:
    data = b"".join(parts)
    count = SseSplitter().content(data)
    splitter = SseSplitter()
    events = splitter.feed(data)
    if count >= 0:
        assert count == len(events)
        assert b"".join(events) == data
        assert splitter.pending() == b""
        assert all(classify(event).kind == "content" for event in events)
