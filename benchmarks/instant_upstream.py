"""An upstream that answers at once with a fixed OpenAI-shaped reply, costing almost no CPU.

    python benchmarks/instant_upstream.py --port 0
    -> instant upstream listening on http://127.0.0.1:PORT

It exists so the overhead benchmark can measure a proxy against an upstream whose own
cost is a few microseconds (asyncio protocol + httptools, no framework): on a 2-core
machine every microsecond the upstream spends is taken from the proxy under test, and a
framework-based upstream would hide part of the difference being measured. The
simulated engine (``fairgate sim --speed 0``) is the faithful alternative (``--upstream sim``
in overhead.py); this one is the lean one.

Answers: ``POST`` with ``"stream": true`` in the body → a short SSE stream ending in
``[DONE]``; any other ``POST`` → a chat completion with usage; ``GET /metrics`` → vLLM's
gauge names at zero; any other ``GET`` → ``{}``.

The stream is 4 content events written at once by default. ``--stream-chunks N`` makes
it N content events written one at a time, ``--chunk-gap`` seconds apart (an engine's
token rate), so a proxy reads each as its own chunk: what a per-token cost is measured on.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import cast

import httptools
import uvloop

__all__ = ["InstantUpstream", "main"]

_COMPLETION = (
    b'{"id":"chatcmpl-instant","object":"chat.completion","created":0,"model":"sim-model",'
    b'"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},'
    b'"finish_reason":"stop"}],"usage":{"prompt_tokens":8,"completion_tokens":1,'
    b'"total_tokens":9}}'
)
_CHUNK = (
    b'data: {"id":"chatcmpl-instant","object":"chat.completion.chunk","created":0,'
    b'"model":"sim-model","choices":[{"index":0,"delta":{"content":"ok"},'
    b'"finish_reason":null}]}\n\n'
)
_METRICS = b"vllm:num_requests_running 0\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0\n"


def _fixed(status: bytes, content_type: bytes, body: bytes) -> bytes:
    head = b"HTTP/1.1 " + status + b"\r\ncontent-type: " + content_type
    return head + b"\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body


_STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)


def _stream(chunks: int) -> bytes:
    events = [_CHUNK] * chunks + [b"data: [DONE]\n\n"]
    body = b"".join(b"%x\r\n%s\r\n" % (len(event), event) for event in events)
    return _STREAM_HEAD + body + b"0\r\n\r\n"


_ANSWER_JSON = _fixed(b"200 OK", b"application/json", _COMPLETION)
_ANSWER_STREAM = _stream(4)
_CHUNK_FRAMED = b"%x\r\n%s\r\n" % (len(_CHUNK), _CHUNK)
_DONE_FRAMED = b"%x\r\n%s\r\n0\r\n\r\n" % (len(b"data: [DONE]\n\n"), b"data: [DONE]\n\n")
_USAGE = (
    b'data: {"id":"chatcmpl-instant","object":"chat.completion.chunk","created":0,'
    b'"model":"sim-model","choices":[],"usage":{"prompt_tokens":8,"completion_tokens":%d,'
    b'"total_tokens":%d}}\n\n'
)
_ANSWER_METRICS = _fixed(b"200 OK", b"text/plain; version=0.0.4", _METRICS)
_ANSWER_EMPTY = _fixed(b"200 OK", b"application/json", b"{}")


class InstantUpstream(asyncio.Protocol):
    """One connection: parse each request, answer with a prepared reply; keep-alive always.

    ``chunks``: a stream's content events, written one at a time ``gap`` seconds apart
    (0: the 4-event stream in one write)."""

    def __init__(self, chunks: int = 0, gap: float = 0.0) -> None:
        self._chunks = chunks
        self._gap = gap
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._url = b""
        self._body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            if self._transport is not None:
                self._transport.close()

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        method = self._parser.get_method()
        body = b"".join(self._body)
        url, self._url, self._body = self._url, b"", []
        transport = self._transport
        if transport is None:
            return
        if self._chunks and method == b"POST" and _streaming(body):
            transport.write(_STREAM_HEAD)
            usage = b'"include_usage":true' in body or b'"include_usage": true' in body
            self._paced(transport, self._chunks, self._chunks if usage else 0)
        else:
            transport.write(_answer(method, url, body))

    def _paced(self, transport: asyncio.Transport, left: int, usage: int) -> None:
        """One content event now, the rest ``gap`` seconds apart, then the usage event
        (``usage`` tokens, when the request asked for it: 0 when not) and ``[DONE]``."""
        if transport.is_closing():  # the client went: an engine stops generating
            return
        if not left:
            if usage:
                event = _USAGE % (usage, usage + 8)
                transport.write(b"%x\r\n%s\r\n" % (len(event), event))
            transport.write(_DONE_FRAMED)
            return
        transport.write(_CHUNK_FRAMED)
        asyncio.get_running_loop().call_later(self._gap, self._paced, transport, left - 1, usage)


def _answer(method: bytes, url: bytes, body: bytes) -> bytes:
    if method == b"POST":
        return _ANSWER_STREAM if _streaming(body) else _ANSWER_JSON
    return _ANSWER_METRICS if url.startswith(b"/metrics") else _ANSWER_EMPTY


def _streaming(body: bytes) -> bool:
    return b'"stream":true' in body or b'"stream": true' in body


async def _serve(host: str, port: int, chunks: int, gap: float) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: InstantUpstream(chunks, gap), host, port, backlog=2048
    )
    bound = server.sockets[0].getsockname()[1]
    print(f"instant upstream listening on http://{host}:{bound}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument(
        "--stream-chunks", type=int, default=0, help="content events per stream, paced"
    )
    parser.add_argument(
        "--chunk-gap", type=float, default=0.005, help="seconds between paced events"
    )
    args = parser.parse_args(argv)
    try:
        uvloop.run(_serve(args.host, args.port, args.stream_chunks, args.chunk_gap))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
