"""Chat and text completion bodies and stream events, as a client parses them."""

from __future__ import annotations

import orjson
import pytest

from fairgate.sim.completions import ChatFormat, CompletionFormat
from fairgate.sim.output import Usage

USAGE = Usage(prompt=10, completion=3, cached=4)


def _events(data: bytes) -> list[object]:
    chunks = [c for c in data.split(b"\n\n") if c]
    assert all(c.startswith(b"data: ") for c in chunks)
    return [c[6:].decode() if c == b"data: [DONE]" else orjson.loads(c[6:]) for c in chunks]


def test_chat_stream_role_tokens_finish_usage_done() -> None:
    fmt = ChatFormat("m")
    pieces = ["a", " b", " c"]
    data = b"".join(
        fmt.token(p, i, "length" if i == 2 else None) for i, p in enumerate(pieces)
    ) + fmt.closing("a b c", USAGE, "length", include_usage=True)
    events = _events(data)
    assert events[-1] == "[DONE]"
    chunks = [e for e in events[:-1] if isinstance(e, dict)]
    assert {c["id"] for c in chunks} == {fmt.id}
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    deltas = [c["choices"][0]["delta"]["content"] for c in chunks[1:-1]]
    assert deltas == pieces
    assert [c["choices"][0]["finish_reason"] for c in chunks[1:-1]] == [None, None, "length"]
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {
        "prompt_tokens": 10,
        "total_tokens": 13,
        "completion_tokens": 3,
        "prompt_tokens_details": {"cached_tokens": 4},
    }


def test_pieces_with_quotes_and_newlines_stay_valid_json() -> None:
    fmt = CompletionFormat("m")
    (event,) = _events(fmt.token('say "hi"\n\\', 1, None))
    assert isinstance(event, dict) and event["choices"][0]["text"] == 'say "hi"\n\\'


def test_without_include_usage_the_stream_just_ends() -> None:
    assert ChatFormat("m").closing("x", USAGE, "stop", include_usage=False) == b"data: [DONE]\n\n"


@pytest.mark.parametrize("fmt", [ChatFormat("m"), CompletionFormat("m")])
def test_whole_bodies(fmt: ChatFormat | CompletionFormat) -> None:
    body = orjson.loads(fmt.whole("a b", USAGE, "stop"))
    assert body["id"] == fmt.id and body["model"] == "m"
    choice = body["choices"][0]
    text = choice["message"]["content"] if "message" in choice else choice["text"]
    assert text == "a b" and choice["finish_reason"] == "stop"
    assert body["usage"]["prompt_tokens_details"] == {"cached_tokens": 4}
    assert body["object"] in ("chat.completion", "text_completion")
