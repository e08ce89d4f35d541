"""Properties of the stream relay: whatever the engine's chunk boundaries, the client gets
exactly the engine's events, in order, none merged, none cut, none dropped, and the usage
chunk is taken and, when the client did not ask for it, removed.

The engine is a real TCP server in the test writing a chunked HTTP/1.1 response cut where
hypothesis says (mid-line, mid-separator, mid-UTF-8 character), read by the gateway's own
upstream pool and relayed by its ``Relay``, as in the proxy.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import socket
import time
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from fairgate.proxy.exchange import Exchange, Outcome
from fairgate.proxy.relay import Deadlines, Relay
from fairgate.proxy.usage import Usage
from fairgate.upstream import UpstreamPool

pytestmark = pytest.mark.fuzz

GENEROUS = Deadlines(
    connect=10,
    headers=10,
    first_token=10,
    idle=10,
    total=30,
    slow_reader=10,
    max_response_bytes=1 << 20,
)


@dataclass(frozen=True)
class Event:
    raw: bytes
    kind: str  # content | usage | done


@dataclass(frozen=True)
class Engine:
    host: str
    port: int
    tls: bool = False
    internal_key: str | None = None


_ENDINGS = st.sampled_from([b"\n", b"\r\n"])


@st.composite
def content_events(draw: st.DrawFn) -> Event:
    end = draw(_ENDINGS)
    text = draw(st.text(max_size=12))
    payload = orjson.dumps({"id": "c1", "choices": [{"index": 0, "delta": {"content": text}}]})
    lines = [b"data: " + payload]
    if draw(st.booleans()):
        lines.insert(0, b"event: message")
    if draw(st.booleans()):
        lines.insert(0, b": " + draw(st.sampled_from([b"keep-alive", b"", b"x" * 40])))
    return Event(end.join(lines) + end + end, "content")


@st.composite
def usage_events(draw: st.DrawFn) -> Event:
    end = draw(_ENDINGS)
    prompt, completion = draw(st.integers(0, 10**6)), draw(st.integers(0, 10**6))
    payload = orjson.dumps(
        {
            "id": "c1",
            "choices": [],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }
    )
    return Event(b"data: " + payload + end + end, "usage")


@st.composite
def chunked_streams(draw: st.DrawFn) -> tuple[list[Event], list[bytes]]:
    """The events of one stream and the chunks the engine writes them in."""
    events = draw(st.lists(content_events(), min_size=1, max_size=8))
    if draw(st.booleans()):
        events.append(draw(usage_events()))
    end = draw(_ENDINGS)
    events.append(Event(b"data: [DONE]" + end + end, "done"))
    stream = b"".join(e.raw for e in events)
    cuts = sorted(draw(st.sets(st.integers(1, len(stream) - 1), max_size=12)))
    bounds = [0, *cuts, len(stream)]
    return events, [stream[a:b] for a, b in itertools.pairwise(bounds)]


def _dispatched(stream: bytes) -> list[bytes]:
    """The data of each event a client dispatches (the SSE specification's parsing, with
    comment-only events kept as empty data so that every event is counted)."""
    events: list[bytes] = []
    data: list[bytes] | None = None
    for line in re.split(rb"\r\n|\r|\n", stream):
        if line == b"":
            if data is not None:
                events.append(b"\n".join(data))
            data = None
            continue
        data = data if data is not None else []
        if line.startswith(b"data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(b" ") else value)
    return events


async def _serve(chunks: list[bytes]) -> tuple[asyncio.Server, int]:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        for chunk in chunks:
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            await writer.drain()
            await asyncio.sleep(0)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    for sock in server.sockets:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return server, server.sockets[0].getsockname()[1]


async def _relay(chunks: list[bytes], strip_usage: bool) -> tuple[Exchange, list[bytes]]:
    server, port = await _serve(chunks)
    pool = UpstreamPool(connect_timeout=5)
    relay = Relay(GENEROUS, pool)
    ex = Exchange("r1", "POST", "/v1/chat/completions", time.monotonic(), stream=True)
    sent: list[bytes] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            sent.append(message["body"])

    try:
        headers = [(b"host", b"engine"), (b"content-type", b"application/json")]
        opened = await relay.open(
            ex, Engine("127.0.0.1", port), b"/v1/chat/completions", headers, b"{}"
        )
        await relay.stream(ex, opened, send, [], strip_usage=strip_usage)
    finally:
        await pool.close()
        server.close()
        await server.wait_closed()
    return ex, sent


@given(stream=chunked_streams(), strip_usage=st.booleans())
@example(  # the usage chunk and [DONE] split mid-separator, CRLF after LF events
    stream=(
        [
            Event(b'data: {"choices":[{"delta":{"content":"\xc3\xa9"}}]}\n\n', "content"),
            Event(
                b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}\r\n\r\n',
                "usage",
            ),
            Event(b"data: [DONE]\n\n", "done"),
        ],
        [
            b'data: {"choices":[{"delta":{"content":"\xc3',
            b'\xa9"}}]}\n',
            b'\ndata: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}\r\n\r',
            b"\ndata: [DONE]\n",
            b"\n",
        ],
    ),
    strip_usage=True,
)
def test_the_client_gets_exactly_the_engines_events_whatever_the_chunks(
    stream: tuple[list[Event], list[bytes]], strip_usage: bool
) -> None:
    events, chunks = stream
    ex, sent = asyncio.run(_relay(chunks, strip_usage))
    expected = [e.raw for e in events if not (strip_usage and e.kind == "usage")]
    assert b"".join(sent) == b"".join(expected)
    # Every write to the client ends on an event boundary: never half an event.
    boundaries = {sum(len(raw) for raw in expected[:i]) for i in range(len(expected) + 1)}
    written = 0
    for body in sent:
        written += len(body)
        assert written in boundaries
    # And a client parsing the bytes as the SSE specification says sees the same data.
    assert _dispatched(b"".join(sent)) == [_dispatched(raw)[0] for raw in expected]
    assert ex.outcome == Outcome.OK, ex.reason
    assert ex.content_events == sum(e.kind == "content" for e in events)
    usage = [e for e in events if e.kind == "usage"]
    if usage:
        figures = orjson.loads(usage[0].raw.split(b"data: ", 1)[1])["usage"]
        assert ex.usage == Usage(figures["prompt_tokens"], figures["completion_tokens"])
    else:
        assert ex.usage is None
