"""uvicorn's httptools protocol with the limits a gateway's listener needs.

uvicorn times out idle keep-alive connections but not a request head that is
trickled in one byte at a time (slowloris), and it accepts request heads of any
size. This subclass adds both limits and sets the per-connection write buffer:

- ``head_timeout``: from the first byte of a request to the end of its headers;
  a connection still in its head after that is closed.
- ``max_head_bytes``: the request line and headers together; larger → 431, closed.
- ``write_buffer_bytes``: bytes buffered toward a client before a write waits for
  the client to read (the stream's bound toward a slow reader).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["limited_protocol"]


class _LimitedProtocol(HttpToolsProtocol):
    head_timeout: float = 10.0
    max_head_bytes: int = 64 * 1024
    write_buffer_bytes: int = 64 * 1024

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        transport.set_write_buffer_limits(high=self.write_buffer_bytes)
        self._start_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_bytes = 0
        if self._head_timer is None:
            self._start_head_timer()

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._stop_head_timer()
        super().on_headers_complete()

    def _count(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > self.max_head_bytes:
            self._too_large = True
            # httptools turns this into a parser error; uvicorn then calls send_400_response.
            raise ValueError("request head too large")

    def send_400_response(self, msg: str) -> None:
        if not getattr(self, "_too_large", False):
            super().send_400_response(msg)
            return
        self._stop_head_timer()
        body = (
            b'{"error":{"message":"request header fields too large",'
            b'"type":"invalid_request_error","code":null}}'
        )
        self.transport.write(
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
            b"connection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        self.transport.close()

    def _start_head_timer(self) -> None:
        loop = asyncio.get_running_loop()
        self._head_timer = loop.call_later(self.head_timeout, self._head_expired)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_expired(self) -> None:
        self._head_timer = None
        self.transport.close()


def limited_protocol(
    *, head_timeout: float, max_head_bytes: int, write_buffer_bytes: int
) -> type[HttpToolsProtocol]:
    """A protocol class with these limits, for ``uvicorn.Config(http=...)``."""
    return type(
        "LimitedHttpToolsProtocol",
        (_LimitedProtocol,),
        {
            "head_timeout": head_timeout,
            "max_head_bytes": max_head_bytes,
            "write_buffer_bytes": write_buffer_bytes,
        },
    )
