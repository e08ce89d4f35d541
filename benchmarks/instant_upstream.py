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


def _stream(chunks: int) -> bytes:
    events = [_CHUNK] * chunks + [b"data: [DONE]\n\n"]
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    body = b"".join(b"%x\r\n%s\r\n" % (len(event), event) for event in events)
    return head + body + b"0\r\n\r\n"


_ANSWER_JSON = _fixed(b"200 OK", b"application/json", _COMPLETION)
_ANSWER_STREAM = _stream(4)
_ANSWER_METRICS = _fixed(b"200 OK", b"text/plain; version=0.0.4", _METRICS)
_ANSWER_EMPTY = _fixed(b"200 OK", b"application/json", b"{}")


class InstantUpstream(asyncio.Protocol):
    """One connection: parse each request, answer with a prepared reply; keep-alive always."""

    def __init__(self) -> None:
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
        if self._transport is not None:
            self._transport.write(_answer(method, url, body))


def _answer(method: bytes, url: bytes, body: bytes) -> bytes:
    if method == b"POST":
        streaming = b'"stream":true' in body or b'"stream": true' in body
        return _ANSWER_STREAM if streaming else _ANSWER_JSON
    return _ANSWER_METRICS if url.startswith(b"/metrics") else _ANSWER_EMPTY


async def _serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(InstantUpstream, host, port, backlog=2048)
    bound = server.sockets[0].getsockname()[1]
    print(f"instant upstream listening on http://{host}:{bound}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        uvloop.run(_serve(args.host, args.port))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
