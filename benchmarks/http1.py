"""A lean HTTP/1.1 client over persistent connections, for timing servers rather than clients.

Why not aiohttp or httpx on the measuring side: both cost tens of microseconds of Python
per request, which adds noise to every leg and, in throughput mode, competes for the same
two cores as the server under test. This client writes a request prepared once as bytes
and parses the answer with httptools (llhttp, in C), so its cost per request is a few
microseconds and is the same on every leg (direct, minimal proxy, gateway).

One ``Connection`` carries one request at a time (no pipelining), kept alive between
requests. A response body arrives whole in ``Response.body``; with ``stream=True`` each
chunk also goes to ``Exchange.chunks`` as it arrives, ending with ``None``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import cast

import httptools

__all__ = ["Connection", "Exchange", "Response", "connect", "request_bytes"]


@dataclass(slots=True)
class Response:
    status: int
    headers: dict[bytes, bytes]
    body: bytes
    keep_alive: bool


@dataclass(slots=True)
class Exchange:
    """One request in flight: its head (status and headers), the whole response, and for
    streams each body chunk in order as it arrives (then ``None``)."""

    response: asyncio.Future[Response]
    head: asyncio.Future[None]
    chunks: asyncio.Queue[bytes | None] | None = None
    headers: dict[bytes, bytes] = field(default_factory=dict)
    body: list[bytes] = field(default_factory=list)
    status: int = 0


def request_bytes(
    method: str,
    host: str,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
) -> bytes:
    """The request head and body, ready to write; Content-Length always set."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class Connection(asyncio.Protocol):
    """A persistent connection; ``send`` one request at a time, await its ``Exchange``."""

    def __init__(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._exchange: Exchange | None = None
        self._header_name = b""
        self.closed = False

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ConnectionError(f"bad response: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(ConnectionError("connection closed by the server"))

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        if self._exchange is not None:
            self._exchange.headers[name.lower()] = value

    def on_headers_complete(self) -> None:
        exchange = self._exchange
        if exchange is not None:
            exchange.status = self._parser.get_status_code()
            exchange.head.set_result(None)

    def on_body(self, body: bytes) -> None:
        exchange = self._exchange
        if exchange is None:
            return
        exchange.body.append(body)
        if exchange.chunks is not None:
            exchange.chunks.put_nowait(body)

    def on_message_complete(self) -> None:
        exchange, self._exchange = self._exchange, None
        if exchange is None:
            return
        keep_alive = self._parser.should_keep_alive()
        if exchange.chunks is not None:
            exchange.chunks.put_nowait(None)
        body = b"".join(exchange.body)
        exchange.response.set_result(Response(exchange.status, exchange.headers, body, keep_alive))
        if not keep_alive:
            self.close()

    # the client side
    def send(self, raw: bytes, *, stream: bool = False) -> Exchange:
        """Write one request; the connection must be idle (no response outstanding)."""
        if self._exchange is not None:
            raise RuntimeError("a request is already in flight on this connection")
        if self.closed or self._transport is None:
            raise ConnectionError("connection is closed")
        loop = asyncio.get_running_loop()
        exchange = Exchange(
            response=loop.create_future(),
            head=loop.create_future(),
            chunks=asyncio.Queue() if stream else None,
        )
        self._exchange = exchange
        self._transport.write(raw)
        return exchange

    async def fetch(self, raw: bytes) -> Response:
        """Send one request and wait for the whole response."""
        return await self.send(raw).response

    @property
    def idle(self) -> bool:
        return self._exchange is None and not self.closed

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()

    def _fail(self, exc: Exception) -> None:
        exchange, self._exchange = self._exchange, None
        if exchange is None:
            return
        for future in (exchange.response, exchange.head):
            if not future.done():
                future.set_exception(exc)
                future.exception()  # retrieved here: a caller may await only one of the two
        if exchange.chunks is not None:
            exchange.chunks.put_nowait(None)


async def connect(host: str, port: int) -> Connection:
    """Open a connection with TCP_NODELAY (asyncio sets it on TCP transports)."""
    loop = asyncio.get_running_loop()
    _transport, protocol = await loop.create_connection(Connection, host, port)
    return protocol
