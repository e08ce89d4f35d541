"""An engine's answer as the client hands it over: head at once, body as it arrives."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol

from fairgate.upstream.errors import UpstreamProtocolError, UpstreamTooLarge

__all__ = ["BodySource", "UpstreamResponse"]


class BodySource(Protocol):
    """What a response reads its body from: the connection it arrived on
    (``upstream.http1.Http1Connection``), which imports this module, not the reverse."""

    @property
    def body_complete(self) -> bool:
        """The whole body has arrived."""
        ...

    async def read_chunk(self) -> bytes:
        """The body received since the last read, waiting for some if none."""
        ...

    def release(self) -> None:
        """Done with the body: keep the connection if it is complete, else close it."""
        ...

    def abort(self) -> None:
        """Close the connection now."""
        ...


class UpstreamResponse:
    """An engine's answer: status and headers at once, the body read as it arrives.

    ``headers`` are (lower-cased name, value) pairs in the order received;
    ``content_length`` is the declared length, ``None`` for chunked or close-delimited
    bodies. Exactly one of ``release()`` (the whole body arrived and the connection may be
    kept: it goes back to the pool; otherwise it is closed) or ``close()`` (closed now: the
    engine sees the disconnect and stops generating) must end every response; both are
    idempotent. Reading after either returns ``b""`` if the body was complete, else raises
    ``UpstreamProtocolError``.
    """

    __slots__ = ("_conn", "_ended", "content_length", "headers", "status")

    def __init__(self, conn: BodySource) -> None:
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.content_length: int | None = None
        self._conn: BodySource | None = conn
        self._ended = False

    def header(self, name: bytes) -> bytes | None:
        """The first value of header ``name`` (any case), or ``None``."""
        name = name.lower()
        for key, value in self.headers:
            if key == name:
                return value
        return None

    def read_chunk(self) -> Awaitable[bytes]:
        """The body received since the last read (de-chunked), waiting for some if none;
        ``b""`` at the end. Raises ``UpstreamProtocolError`` if the connection broke before
        the end. Cancelled while waiting, the connection is closed.

        Not a coroutine of its own: it hands over the connection's, so a stream's read
        resumes one coroutine fewer for each chunk."""
        conn = self._conn
        if conn is None:
            return _after_end(self._ended)
        return conn.read_chunk()

    async def read_all(self, limit: int) -> bytes:
        """The whole body; past ``limit`` bytes raises ``UpstreamTooLarge`` and closes."""
        declared = self.content_length
        conn = self._conn
        if declared is not None and declared > limit and conn and not conn.body_complete:
            self.close()  # (a HEAD answer declares a length and has no body)
            raise UpstreamTooLarge(f"the body declares {declared} bytes")
        chunks: list[bytes] = []
        size = 0
        while chunk := await self.read_chunk():
            size += len(chunk)
            if size > limit:
                self.close()
                raise UpstreamTooLarge(f"the body is longer than {limit} bytes")
            chunks.append(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._ended = conn.body_complete
            conn.release()

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._ended = conn.body_complete
            conn.abort()


async def _after_end(complete: bool) -> bytes:
    if complete:
        return b""
    raise UpstreamProtocolError("the response was closed before its end")
