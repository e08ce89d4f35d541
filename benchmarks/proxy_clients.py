"""The upstream client layers the minimal proxy can forward with, behind one small Protocol.

- ``aiohttp``: one shared ``aiohttp.ClientSession`` (keep-alive pool) — the gateway's client.
- ``httpx``: one shared ``httpx.AsyncClient`` (keep-alive pool).
- ``raw``: persistent connections of benchmarks/http1.py (httptools parser, no framework):
  what a client layer costs when it does nothing but HTTP/1.1.
- ``fairgate``: the gateway's own ``fairgate.upstream.pool.UpstreamPool`` (httptools, a
  keep-alive pool with flow control, retries on the keep-alive race, bounded heads).

Each relays one request: status, content-type and body; an SSE answer is relayed chunk by
chunk (``relay_stream``), and a client disconnect cancels it, which closes the upstream
connection so the engine stops generating.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import aiohttp
import httpx

from fairgate.upstream.pool import UpstreamPool
from fairgate.upstream.response import UpstreamResponse
from http1 import Connection, connect, request_bytes

__all__ = ["CLIENTS", "UpstreamClient", "relay_stream"]

_IDLE_TIMEOUT = 4.0  # seconds an idle upstream connection is kept (see AiohttpClient.open)

Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class UpstreamClient(Protocol):
    """Forwards one request to the fixed upstream and relays the answer to ``send``.

    ``open`` runs once inside the serving event loop before the first request;
    ``close`` once at shutdown. Upstream failures propagate (the server answers 500).
    """

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def relay(
        self, method: str, path: str, ctype: bytes, body: bytes, receive: Receive, send: Send
    ) -> None: ...


def _start(status: int, ctype: bytes, length: int | None) -> Message:
    headers = [(b"content-type", ctype)]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    return {"type": "http.response.start", "status": status, "headers": headers}


async def _whole(status: int, ctype: bytes, data: bytes, send: Send) -> None:
    await send(_start(status, ctype, len(data)))
    await send({"type": "http.response.body", "body": data})


async def relay_stream(
    status: int, ctype: bytes, chunks: AsyncIterator[bytes], receive: Receive, send: Send
) -> None:
    """Relay chunks as they come; on ``http.disconnect`` stop at once (the caller closes)."""
    relay = asyncio.current_task()
    assert relay is not None

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        relay.cancel()

    watcher = asyncio.create_task(watch())
    try:
        await send(_start(status, ctype, None))
        async for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    except asyncio.CancelledError:
        if not watcher.done():
            raise
    finally:
        watcher.cancel()


class AiohttpClient:
    def __init__(self, upstream: str) -> None:
        self._upstream = upstream.rstrip("/")
        self._session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        # Idle connections go before the upstream's keep-alive timeout (uvicorn's 5 s, the
        # simulated engine's), as the gateway's own pool does: a connection the upstream
        # closed while idle, reused, fails the request (500) instead of measuring it.
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=_IDLE_TIMEOUT)
        self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def relay(
        self, method: str, path: str, ctype: bytes, body: bytes, receive: Receive, send: Send
    ) -> None:
        assert self._session is not None
        headers = {"content-type": ctype.decode("latin-1")}
        url = self._upstream + path
        async with self._session.request(method, url, data=body, headers=headers) as resp:
            rtype = resp.headers.get("content-type", "application/json").encode("latin-1")
            if rtype.startswith(b"text/event-stream"):
                await relay_stream(resp.status, rtype, resp.content.iter_any(), receive, send)
            else:
                await _whole(resp.status, rtype, await resp.read(), send)


class HttpxClient:
    def __init__(self, upstream: str) -> None:
        self._upstream = upstream.rstrip("/")
        self._client: httpx.AsyncClient | None = None

    async def open(self) -> None:
        limits = httpx.Limits(
            max_connections=None, max_keepalive_connections=None, keepalive_expiry=_IDLE_TIMEOUT
        )
        self._client = httpx.AsyncClient(limits=limits, timeout=None, trust_env=False)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()

    async def relay(
        self, method: str, path: str, ctype: bytes, body: bytes, receive: Receive, send: Send
    ) -> None:
        assert self._client is not None
        request = self._client.build_request(
            method,
            self._upstream + path,
            content=body,
            headers={"content-type": ctype.decode("latin-1")},
        )
        resp = await self._client.send(request, stream=True)
        try:
            rtype = resp.headers.get("content-type", "application/json").encode("latin-1")
            if rtype.startswith(b"text/event-stream"):
                await relay_stream(resp.status_code, rtype, resp.aiter_raw(), receive, send)
            else:
                await _whole(resp.status_code, rtype, await resp.aread(), send)
        finally:
            await resp.aclose()


class RawClient:
    def __init__(self, upstream: str) -> None:
        hostport = upstream.split("://", 1)[-1].rstrip("/")
        host, _, port = hostport.rpartition(":")
        self._host, self._port, self._hostport = host, int(port), hostport
        self._idle: list[Connection] = []

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        while self._idle:
            self._idle.pop().close()

    async def relay(
        self, method: str, path: str, ctype: bytes, body: bytes, receive: Receive, send: Send
    ) -> None:
        conn = await self._take()
        raw = request_bytes(method, self._hostport, path, body, {"content-type": ctype.decode()})
        exchange = conn.send(raw, stream=True)
        try:
            await exchange.head
            rtype = exchange.headers.get(b"content-type", b"application/json")
            if rtype.startswith(b"text/event-stream"):
                await relay_stream(exchange.status, rtype, _drain(exchange.chunks), receive, send)
            else:
                resp = await exchange.response
                await _whole(resp.status, rtype, resp.body, send)
        finally:
            if conn.idle:
                self._idle.append(conn)
            else:
                conn.close()

    async def _take(self) -> Connection:
        while self._idle:
            conn = self._idle.pop()
            if conn.idle:
                return conn
        return await connect(self._host, self._port)


async def _drain(chunks: asyncio.Queue[bytes | None] | None) -> AsyncIterator[bytes]:
    assert chunks is not None
    while (chunk := await chunks.get()) is not None:
        yield chunk


class FairgateClient:
    def __init__(self, upstream: str) -> None:
        hostport = upstream.split("://", 1)[-1].rstrip("/")
        host, _, port = hostport.rpartition(":")
        self._host, self._port = host, int(port)
        self._pool: UpstreamPool | None = None

    async def open(self) -> None:
        self._pool = UpstreamPool(connect_timeout=10.0)

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()

    async def relay(
        self, method: str, path: str, ctype: bytes, body: bytes, receive: Receive, send: Send
    ) -> None:
        assert self._pool is not None
        headers = [(b"content-type", ctype)]
        resp = await self._pool.request(
            method, self._host, self._port, path.encode(), headers, body
        )
        try:
            rtype = resp.header(b"content-type") or b"application/json"
            if rtype.startswith(b"text/event-stream"):
                await relay_stream(resp.status, rtype, _chunks(resp), receive, send)
            else:
                await _whole(resp.status, rtype, await resp.read_all(1 << 30), send)
        except BaseException:
            resp.close()
            raise
        resp.release()


async def _chunks(resp: UpstreamResponse) -> AsyncIterator[bytes]:
    while chunk := await resp.read_chunk():
        yield chunk


CLIENTS: dict[str, Callable[[str], UpstreamClient]] = {
    "aiohttp": AiohttpClient,
    "httpx": HttpxClient,
    "raw": RawClient,
    "fairgate": FairgateClient,
}
