"""One HTTP/1.1 connection to an engine: write a request, parse the answer, stream its body.

The gateway's hot path talks to engines through this module and ``pool.py`` rather than
aiohttp's client: in the overhead benchmark aiohttp's client cost 118–158 µs of CPU per
request, against ~25–30 µs for a plain client on the same parser (llhttp, through
httptools). ``Http1Connection`` is an ``asyncio.Protocol`` — no StreamReader layers, no
task per request: the parser's callbacks fill the ``UpstreamResponse`` in place and wake
the one task waiting on it.

One connection carries one exchange at a time (no pipelining):

    idle ──send()──▶ head ──status and headers──▶ body ──last byte──▶ done
      ▲              (1xx answers skipped)      (HEAD, 204, 304: straight to done)
      └──── release(): the whole answer arrived and keep-alive holds; otherwise closed

Keep-alive ends with ``connection: close`` from either side, an HTTP/1.0 answer without
``keep-alive``, a body delimited by the connection's close, and any byte that arrives
while no answer is expected. Errors are those of ``fairgate.upstream.errors``.

The resend rule. ``send`` raises ``UpstreamClosedBeforeAnswer`` (which the pool may send
again elsewhere) only when the connection is known to be closed before the request was
written: the server's close or reset already waits in the kernel when ``send`` begins
(``reusable`` polls the socket, so the loop need not have seen it yet), or the write
itself fails. Once the request was handed to the socket, a close without an answer is an
``UpstreamProtocolError``: the server may have read the whole request and started on it
(a generation), so sending it again could run it twice.
"""

from __future__ import annotations

import asyncio
import select
from collections import deque
from typing import Protocol, cast

import httptools

from fairgate.upstream.errors import (
    UpstreamClosedBeforeAnswer,
    UpstreamError,
    UpstreamProtocolError,
)
from fairgate.upstream.response import UpstreamResponse

__all__ = ["BODY_BUFFER_BYTES", "ConnectionHome", "Http1Connection"]

# Reading stops while this much body is buffered and unread, and resumes once the reader
# took it: per stream, memory stays near this plus one socket read (256 KiB on uvloop).
BODY_BUFFER_BYTES = 256 * 1024

_IDLE, _HEAD, _BODY, _DONE = 0, 1, 2, 3
_NO_BODY_STATUSES = frozenset({204, 304})


class ConnectionHome(Protocol):
    """The pool's side of a connection: ``reuse`` takes it back idle after a clean exchange;
    ``lost`` hears that an idle one was closed by the server (or sent unasked bytes)."""

    def reuse(self, conn: Http1Connection) -> None: ...

    def lost(self, conn: Http1Connection) -> None: ...


class Http1Connection(asyncio.Protocol):
    """One keep-alive connection; the pool creates it, ``send`` runs one exchange at a time.

    Flow control: past ``BODY_BUFFER_BYTES`` of unread body the transport stops reading, so
    a relay that does not read holds back the engine instead of filling memory. Every
    await (``send``, ``read_chunk``) closes the connection when cancelled: it never goes
    back to the pool in an unknown state.
    """

    __slots__ = (
        "_body_ended_by_eof",
        "_buffered",
        "_chunks",
        "_closed",
        "_error",
        "_fd",
        "_got_bytes",
        "_head_bytes",
        "_home",
        "_is_head",
        "_keep_alive",
        "_loop",
        "_max_head",
        "_parser",
        "_parser_spent",
        "_paused",
        "_phase",
        "_response",
        "_transport",
        "_waiter",
        "idle_since",
    )

    def __init__(
        self, home: ConnectionHome, loop: asyncio.AbstractEventLoop, max_head_bytes: int
    ) -> None:
        self._home = home
        self._loop = loop
        self._max_head = max_head_bytes
        self._parser = httptools.HttpResponseParser(self)
        self._parser_spent = False
        self._transport: asyncio.Transport | None = None
        self._fd = -1
        self._phase = _IDLE
        self._closed = False
        self._error: UpstreamError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._response: UpstreamResponse | None = None
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._paused = False
        self._got_bytes = False
        self._head_bytes = 0
        self._is_head = False
        self._keep_alive = True
        self._body_ended_by_eof = False
        self.idle_since = 0.0

    # -- the client side ----------------------------------------------------------------

    @property
    def reusable(self) -> bool:
        """Idle, open, and nothing waiting in the kernel: a close, a reset or unasked bytes
        the event loop has not read yet all retire the connection before a request goes
        out on it (one ``poll`` of the socket with no wait)."""
        return self._phase == _IDLE and self._open() and not self._input_pending()

    def _input_pending(self) -> bool:
        if self._fd < 0:
            return False
        poller = select.poll()
        poller.register(self._fd, select.POLLIN | select.POLLPRI)
        try:
            return bool(poller.poll(0))
        except OSError:  # the descriptor is gone: nothing can be sent on it
            return True

    @property
    def body_complete(self) -> bool:
        return self._phase == _DONE and self._error is None

    async def send(
        self, head: bytes, body: bytes, *, is_head: bool, close: bool
    ) -> UpstreamResponse:
        """Write one request (``head`` from ``RequestHeadEncoder``) and wait for the answer's
        status and headers. ``is_head``: the method was HEAD (no body follows whatever the
        headers say); ``close``: the request asked for ``connection: close``."""
        transport = self._transport
        assert transport is not None and self._phase == _IDLE
        response = UpstreamResponse(self)
        self._response = response
        self._phase = _HEAD
        self._is_head = is_head
        self._keep_alive = not close
        self._got_bytes = False
        self._head_bytes = 0
        # One write, one segment for a small request; a large body is not copied. Nothing
        # waits for the write buffer to drain: the body is in memory already either way.
        if len(body) <= 16 * 1024:
            transport.write(head + body)
        else:
            transport.writelines((head, body))
        if transport.is_closing():  # the write itself failed: the request did not go out
            self._error = UpstreamClosedBeforeAnswer(
                "the connection closed as the request went out"
            )
            self._close(abort=True)
        while self._phase == _HEAD:
            if self._error is not None:
                raise self._error
            await self._wait()
        return response

    async def read_chunk(self) -> bytes:
        while True:
            chunks = self._chunks
            if chunks:
                data = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
                chunks.clear()
                self._buffered = 0
                if self._paused:
                    self._paused = False
                    if self._open():
                        cast(asyncio.Transport, self._transport).resume_reading()
                return data
            if self._phase == _DONE:
                return b""
            if self._error is not None:
                raise self._error
            # ``_wait`` written out: a stream's every chunk waits here, and one coroutine
            # fewer in the chain is two Python calls fewer a chunk
            waiter = self._loop.create_future()
            self._waiter = waiter
            try:
                await waiter
            except asyncio.CancelledError:
                self.abort()
                raise
            finally:
                self._waiter = None

    def release(self) -> None:
        """Back to the pool if the whole answer arrived and keep-alive holds, else closed."""
        if not (self._phase == _DONE and self._keep_alive and self._error is None and self._open()):
            self.abort()
            return
        self._phase = _IDLE
        self._response = None
        self._chunks.clear()
        self._buffered = 0
        if self._paused:
            self._paused = False
            assert self._transport is not None
            self._transport.resume_reading()
        if self._parser_spent:  # it took a HEAD answer for one with a body: start afresh
            self._parser = httptools.HttpResponseParser(self)
            self._parser_spent = False
        self._home.reuse(self)

    def _open(self) -> bool:
        transport = self._transport
        return not self._closed and transport is not None and not transport.is_closing()

    def abort(self) -> None:
        """Close at once, discarding unsent bytes; a reader still waiting gets an error."""
        if self._phase in (_HEAD, _BODY) and self._error is None:
            self._error = UpstreamProtocolError("the response was closed before its end")
        self._close(abort=True)
        self._wake()

    def close(self) -> None:
        """Close an idle connection politely (the pool's idle expiry and shutdown)."""
        self._close(abort=False)

    def _close(self, *, abort: bool) -> None:
        if self._closed:
            return
        self._closed = True
        transport = self._transport
        if transport is not None:
            transport.abort() if abort else transport.close()

    async def _wait(self) -> None:
        waiter = self._loop.create_future()
        self._waiter = waiter
        try:
            await waiter
        except asyncio.CancelledError:
            self.abort()
            raise
        finally:
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, error: UpstreamError) -> None:
        if self._error is None:
            self._error = error
        self._close(abort=True)
        self._wake()

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        self._fd = sock.fileno() if sock is not None else -1

    def data_received(self, data: bytes) -> None:
        phase = self._phase
        if phase == _HEAD:
            self._got_bytes = True
            self._head_bytes += len(data)
        elif phase != _BODY:
            # Bytes nobody asked for: after the answer's end or while idle. The stream is
            # out of step with the requests; this connection must not carry another one.
            self._keep_alive = False
            if phase == _IDLE and not self._closed:
                self._home.lost(self)
                self._close(abort=True)
            return
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            if self._phase == _DONE:  # junk after a complete answer: it ended well, but
                self._keep_alive = False  # this connection carries nothing more
            else:  # llhttp's reasons are fixed texts, never the bytes it choked on
                self._fail(UpstreamProtocolError(f"malformed response: {exc}"))
        else:
            if self._phase == _HEAD and self._head_bytes > self._max_head:
                self._fail(_head_too_large(self._max_head))

    def connection_lost(self, exc: Exception | None) -> None:
        was_closed = self._closed
        self._closed = True
        phase = self._phase
        if phase == _IDLE:
            if not was_closed:
                self._home.lost(self)
        elif self._error is None:
            if phase == _HEAD:
                # The request was written (see ``send``): never one to send again.
                self._error = UpstreamProtocolError(
                    "the connection closed before a complete head"
                    if self._got_bytes
                    else "the connection closed after the request was sent, before any answer"
                )
            elif phase == _BODY:
                if self._body_ended_by_eof and exc is None:
                    self._phase = _DONE
                else:
                    self._error = UpstreamProtocolError("the connection closed mid-body")
        self._wake()

    # -- httptools callbacks ------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._phase != _HEAD:  # a second answer to one request: out of step
            self._keep_alive = False

    def on_header(self, name: bytes, value: bytes) -> None:
        response = self._response
        if self._phase == _HEAD and response is not None:
            response.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        response = self._response
        if self._phase != _HEAD or response is None:
            return
        status = self._parser.get_status_code()
        if status < 200:
            if status == 101:  # never asked for: this client sends no Upgrade
                self._fail(UpstreamProtocolError("the engine switched protocols unasked"))
            response.headers = []  # 100 Continue, 102, 103 Early Hints: the answer follows
            return
        size = 0
        length: int | None = None
        framed = False
        for name, value in response.headers:
            size += len(name) + len(value) + 4
            if name == b"content-length":
                length = int(value)  # llhttp has checked its digits already
                framed = True
            elif name == b"transfer-encoding":
                framed = value.rstrip().lower().endswith(b"chunked")
        if size > self._max_head:
            self._fail(_head_too_large(self._max_head))
            return
        response.status = status
        response.content_length = length
        self._keep_alive = self._keep_alive and self._parser.should_keep_alive()
        if self._is_head or status in _NO_BODY_STATUSES:
            self._phase = _DONE
            # llhttp does not know the request was HEAD and may wait for a body: this
            # parser's remaining output is ignored, and a fresh one takes the next answer.
            self._parser_spent = self._is_head
        else:
            self._phase = _BODY
            self._body_ended_by_eof = not framed
        self._wake()

    def on_body(self, body: bytes) -> None:
        if self._phase != _BODY:
            return
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > BODY_BUFFER_BYTES and not self._paused and self._open():
            self._paused = True
            cast(asyncio.Transport, self._transport).pause_reading()
        waiter = self._waiter  # ``_wake`` written out: called for every chunk
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def on_message_complete(self) -> None:
        if self._phase == _BODY:
            self._phase = _DONE
            self._wake()


def _head_too_large(limit: int) -> UpstreamProtocolError:
    return UpstreamProtocolError(f"the response head is larger than {limit} bytes")
