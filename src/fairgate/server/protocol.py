"""uvicorn's httptools protocol with the limits a gateway's listener needs.

uvicorn times out idle keep-alive connections but not a request head that is
trickled in one byte at a time (slowloris), it accepts request heads of any
size, and it closes a connection politely even when the client has stopped
reading (the close then waits for ever). This subclass adds:

- ``head_timeout``: from the first byte of a request (or the connection's
  opening) to the end of its headers; past it the connection is closed — after
  the answer in progress, if there is one.
- ``max_head_bytes``: the request line and headers together; larger → 431,
  closed. Counted on the raw bytes too, so one endless header line is refused
  as it grows rather than buffered until it ends.
- ``write_buffer_bytes``: bytes buffered toward a client before a write waits
  for the client to read (the stream's bound toward a slow reader).
- ``stall_timeout``: how long the kernel keeps a connection whose client takes
  no bytes (``TCP_USER_TIMEOUT``, Linux) — also after the answer was written,
  when only a polite close is left waiting.
- protocol upgrades (``Connection: Upgrade``), which the gateway never performs:
  httptools stops parsing at such a head and takes what follows for the new
  protocol, and uvicorn then parses those bytes as the next request — a request
  smuggled in another's body, past the proxy in front that framed it as a body.
  An upgrade request with a body is answered 400 ``upgrade_not_supported`` unread
  and the connection closed; one without is served as plain HTTP/1.1 and the
  connection closed after its answer, nothing after its head read.
- ``caps`` (``fairgate.server.connections``): connections over the listener's
  cap, or over its cap per client network, are answered 503 at once and closed
  without a byte of their request read.
- the ASGI extension ``fairgate.abort`` (``ABORT_EXTENSION``): a callable that
  drops the connection at once with a reset, discarding unsent bytes; the relay
  calls it on a client that fell too far behind.
- a request body whose framing cannot be parsed (a broken chunk line, a chunk size
  past any bound) is answered 400 ``invalid_http`` at once and the connection
  closed; the app reading it is told the client is gone, and the ASGI extension
  ``fairgate.invalid_body`` (``INVALID_BODY_EXTENSION``), a callable, then answers
  true, so that the request is recorded as the 400 it got (uvicorn paused the
  connection instead, and the app waited for the body until its own timeout).
- the ASGI extension ``fairgate.on_disconnect`` (``DISCONNECT_EXTENSION``): a callable
  that registers one callback (or ``None`` to clear it) called when the connection
  is lost; the pipeline cancels the request's task with it, so noticing a client's
  disconnect costs no watcher task per request.
- the answers the listener writes itself (``400 invalid_http``, ``431``, ``400
  upgrade_not_supported``) carry an ``x-request-id`` of their own, in the OpenAI error
  envelope, and are logged with it and the client's address (``fairgate.server``).
- the ASGI extension ``fairgate.write_waits`` (``WRITE_WAITS_EXTENSION``): a callable
  that answers true when the next message sent would wait for the client to read (the
  bytes buffered toward it are over ``write_buffer_bytes``: an earlier answer on the
  connection not taken yet); the pipeline then gives back what a whole answer holds
  before handing it over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from fairgate.core.errors import error_body
from fairgate.core.network import Network
from fairgate.server.connections import ConnectionCaps, Refusal
from fairgate.server.request_ids import request_ids

__all__ = [
    "ABORT_EXTENSION",
    "DISCONNECT_EXTENSION",
    "INVALID_BODY_EXTENSION",
    "WRITE_WAITS_EXTENSION",
    "limited_protocol",
]

ABORT_EXTENSION = "fairgate.abort"
DISCONNECT_EXTENSION = "fairgate.on_disconnect"
INVALID_BODY_EXTENSION = "fairgate.invalid_body"
WRITE_WAITS_EXTENSION = "fairgate.write_waits"

log = logging.getLogger("fairgate.server")


@dataclass(frozen=True, slots=True)
class _Closing:
    """An answer the listener writes itself, in the OpenAI error envelope, after which
    the connection closes."""

    status: bytes
    message: str
    code: str

    def answer(self, request_id: str) -> bytes:
        body = error_body(self.message, "invalid_request_error", self.code)
        return (
            b"HTTP/1.1 " + self.status + b"\r\ncontent-type: application/json\r\n"
            b"x-request-id: " + request_id.encode() + b"\r\n"
            b"connection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )


_431 = _Closing(
    b"431 Request Header Fields Too Large", "request header fields too large", "headers_too_large"
)
_400 = _Closing(b"400 Bad Request", "invalid HTTP request", "invalid_http")
_UPGRADE = _Closing(
    b"400 Bad Request",
    "protocol upgrades (Connection: Upgrade) are not supported; send the request without one",
    "upgrade_not_supported",
)
_ids = request_ids()  # the listener's own answers: no request reached the app
_RESET_ON_CLOSE = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST
_LINGER = 1.0  # seconds a refused connection waits for its client to close first


class _LimitedProtocol(HttpToolsProtocol):
    head_timeout: float = 10.0
    max_head_bytes: int = 64 * 1024
    write_buffer_bytes: int = 64 * 1024
    stall_timeout: float | None = None
    caps: ConnectionCaps | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_bytes = 0  # request line and headers as parsed
        self._raw_head = 0  # bytes received while a head is incomplete
        self._in_head = True
        self._too_large = False
        self._on_lost: Callable[[], None] | None = None
        self._refused = False  # over a connection cap: answered 503, never served
        # a head asking for a protocol upgrade: "served" (no body) or "refused" (a body)
        self._upgrade: str | None = None
        self._network: Network | None = None  # counted in ``caps`` until lost
        self._invalid_body = False  # the request's body could not be parsed: answered 400
        self._extensions: dict[str, Callable[..., object]] = {
            ABORT_EXTENSION: self.abort,
            DISCONNECT_EXTENSION: self._set_on_lost,
            INVALID_BODY_EXTENSION: self._body_was_invalid,
            WRITE_WAITS_EXTENSION: self._write_waits,
        }

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if self.caps is not None:
            verdict = self.caps.open(_peer(transport))
            if isinstance(verdict, Refusal):
                self._refuse_connection(transport, verdict)
                return
            self._network = verdict
        super().connection_made(transport)
        transport.set_write_buffer_limits(high=self.write_buffer_bytes)
        if self.stall_timeout and hasattr(socket, "TCP_USER_TIMEOUT"):
            self._setsockopt(
                socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(self.stall_timeout * 1000)
            )
        self._start_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        if self._refused:
            return  # never served: uvicorn does not know of it
        if self._network is not None and self.caps is not None:
            self.caps.close(self._network)
            self._network = None
        callback, self._on_lost = self._on_lost, None
        super().connection_lost(exc)
        if callback is not None:
            callback()

    def _refuse_connection(self, transport: asyncio.Transport, refusal: Refusal) -> None:
        """Answer a connection over a cap and close it, reading nothing it sends.

        The answer goes first, then a half close; what the client sends meanwhile is
        discarded, and the connection closes when the client closes its side (uvicorn's
        ``eof_received`` lets the transport close) or after
        ``_LINGER`` seconds, so that the client reads the answer instead of a reset."""
        self._refused = True
        self.transport = transport
        transport.write(refusal.answer)
        if transport.can_write_eof():
            transport.write_eof()
        self._head_timer = asyncio.get_running_loop().call_later(_LINGER, transport.close)

    def _set_on_lost(self, callback: Callable[[], None] | None) -> None:
        self._on_lost = callback

    def _write_waits(self) -> bool:
        # uvicorn's send waits for the client to drain the buffer first when paused
        # (a lost connection resumes writing: nothing waits then)
        return self.flow is not None and self.flow.write_paused

    def data_received(self, data: bytes) -> None:
        if self._refused or self._upgrade is not None:
            return  # a refused connection, or what follows an upgrade's head: never read
        if self._in_head:
            if self._head_timer is None:
                self._start_head_timer()
            self._raw_head += len(data)
        # uvicorn's ``data_received``, except for upgrades (see the module docstring)
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.send_400_response("Invalid HTTP request received.")
            return
        except httptools.HttpParserUpgrade:
            self._upgraded()
            return
        if self._in_head and self._raw_head > self.max_head_bytes and not self._too_large:
            self._too_large = True
            self._refuse_head()

    def _upgraded(self) -> None:
        """The parser stopped at an upgrade's head: nothing after it is read, and the
        connection closes once the request is answered (a bodiless one, served) or at
        once (one with a body, refused in ``on_headers_complete``)."""
        if self._upgrade is None:  # the parser found the upgrade after the head
            self._upgrade = "served"
        self.flow.pause_reading()
        if self._upgrade == "refused":
            self._stop_head_timer()
            if self._responding():
                self.cycle.keep_alive = False  # pipelined behind an answer: after it, close
            else:
                self._close_with(_UPGRADE)
                self.transport.close()
        elif self.cycle is not None:
            self.cycle.keep_alive = False

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
        self._in_head = False
        self._raw_head = 0
        if self.parser.should_upgrade():
            if _has_body(self.headers):
                self._upgrade = "refused"  # the app never sees it (answered in _upgraded)
                return
            self._upgrade = "served"
        self.scope["extensions"] = self._extensions  # type: ignore[typeddict-item]
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        if self._upgrade == "refused":
            return  # no request cycle was started for it
        super().on_message_complete()
        self._in_head = True  # what comes next is the next request's head
        self._raw_head = 0

    def abort(self) -> None:
        """Drop the connection now with a reset, discarding what the client has not read."""
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            # uvicorn then neither reports an unfinished answer nor waits to flush it.
            cycle.disconnected = True
        self._setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET_ON_CLOSE)
        self.transport.abort()

    def _count(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > self.max_head_bytes:
            self._too_large = True
            # httptools turns this into a parser error; uvicorn then calls send_400_response.
            raise ValueError("request head too large")

    def send_400_response(self, msg: str) -> None:
        if self._too_large:
            self._refuse_head()
            return
        # uvicorn's own answer to a request it cannot parse is plain text; callers
        # get the OpenAI envelope like every other gateway error.
        if self._responding():
            cycle = self.cycle
            if cycle.more_body and not cycle.response_started:
                # The request's own body: the app waiting for it reads a disconnect (and
                # answers nothing), the client gets the 400 now.
                self._invalid_body = True
                cycle.disconnected = True
                cycle.message_event.set()
                self._close_with(_400)
                return
            # Unparsable bytes pipelined behind an answer in progress: finish it, then close.
            self.flow.pause_reading()
            self.cycle.keep_alive = False
            return
        self._close_with(_400)

    def _refuse_head(self) -> None:
        self._stop_head_timer()
        if self._responding():
            # A pipelined head too large while an answer streams: finish it, then close.
            self.flow.pause_reading()
            self.cycle.keep_alive = False
            return
        self._close_with(_431)

    def _close_with(self, closing: _Closing) -> None:
        """Write ``closing`` under a request id of its own, log it, close."""
        request_id = _ids()
        log.warning(
            "request %s from %s refused by the listener: %s %s",
            request_id,
            _peer(self.transport),
            closing.status.split(b" ", 1)[0].decode(),
            closing.code,
        )
        self.transport.write(closing.answer(request_id))
        self.transport.close()

    def _body_was_invalid(self) -> bool:
        return self._invalid_body

    def _responding(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _start_head_timer(self) -> None:
        loop = asyncio.get_running_loop()
        self._head_timer = loop.call_later(self.head_timeout, self._head_expired)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_expired(self) -> None:
        self._head_timer = None
        if self._responding():
            self.cycle.keep_alive = False  # the answer in progress ends, then the connection
        else:
            self.transport.close()

    def _setsockopt(self, level: int, option: int, value: int | bytes) -> None:
        # ValueError: uvloop's view of a socket the kernel already closed.
        with contextlib.suppress(OSError, ValueError):
            sock = self.transport.get_extra_info("socket")
            if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
                sock.setsockopt(level, option, value)


def _has_body(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether a head (uvicorn's lower-cased names) announces a body."""
    for name, value in headers:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
            return True
    return False


def _peer(transport: asyncio.Transport) -> str:
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and peer:
        return str(peer[0])
    return str(peer or "")


def limited_protocol(
    *,
    head_timeout: float,
    max_head_bytes: int,
    write_buffer_bytes: int,
    stall_timeout: float | None = None,
    caps: ConnectionCaps | None = None,
) -> type[HttpToolsProtocol]:
    """A protocol class with these limits, for ``uvicorn.Config(http=...)``; one per
    listener, since ``caps`` counts that listener's connections."""
    return type(
        "LimitedHttpToolsProtocol",
        (_LimitedProtocol,),
        {
            "head_timeout": head_timeout,
            "max_head_bytes": max_head_bytes,
            "write_buffer_bytes": write_buffer_bytes,
            "stall_timeout": stall_timeout,
            "caps": caps,
        },
    )
