"""A real HTTP/1.1 peer on 127.0.0.1 that misbehaves on purpose, for the client's tests.

Each accepted connection runs ``handler(conn)``; ``Peer`` counts what a server can see:
connections accepted, requests read (raw heads and bodies) and connections the client
closed (EOF or reset while the handler waits for a request).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from fairgate.upstream.pool import UpstreamPool


@dataclass(eq=False)
class PeerConn:
    """One accepted connection, from the server's side."""

    peer: Peer
    index: int  # 0 for the first connection accepted, 1 for the next…
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    served: int = 0  # requests read on this connection

    async def read_request(self) -> tuple[bytes, bytes] | None:
        """The next request's head (up to the blank line) and body; ``None`` once the client
        closed the connection."""
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            self.peer.client_closed += 1
            self.peer.client_closed_event.set()
            return None
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        body = await self.reader.readexactly(length)
        self.served += 1
        self.peer.requests.append((head, body))
        return head, body

    def write(self, data: bytes) -> None:
        self.writer.write(data)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def answer(self, body: bytes = b"ok", *, extra: bytes = b"") -> None:
        await self.send(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n"
            + extra
            + b"content-length: %d\r\n\r\n" % len(body)
            + body
        )

    def close(self) -> None:
        self.writer.close()

    def reset(self) -> None:
        transport = self.writer.transport
        transport.abort()

    async def wait_closed_by_client(self) -> None:
        """Until the client closes this connection (reads and drops anything it sends)."""
        with contextlib.suppress(ConnectionError):
            while await self.reader.read(65536):
                pass
        self.peer.client_closed += 1
        self.peer.client_closed_event.set()


Handler = Callable[[PeerConn], Awaitable[None]]


async def serve_forever(conn: PeerConn) -> None:
    """A well-behaved keep-alive server: answer every request with its own head as body."""
    while (request := await conn.read_request()) is not None:
        await conn.answer(request[0])


@dataclass(eq=False)
class Peer:
    handler: Handler = serve_forever
    port: int = 0
    accepted: int = 0
    client_closed: int = 0
    requests: list[tuple[bytes, bytes]] = field(default_factory=list)
    conns: list[PeerConn] = field(default_factory=list)
    client_closed_event: asyncio.Event = field(default_factory=asyncio.Event)
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)

    async def start(self, **server_kwargs: Any) -> Peer:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0, **server_kwargs)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = PeerConn(self, self.accepted, reader, writer)
        self.accepted += 1
        self.conns.append(conn)
        stopped = False
        try:
            await self.handler(conn)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            stopped = True  # by stop(): end quietly, asyncio's stream callback inspects it
        finally:
            if stopped:  # drop what is unsent: the client may have stopped reading
                writer.transport.abort()
            else:
                writer.close()
            self._tasks.discard(task)

    async def wait_client_closed(self, count: int, timeout: float = 10.0) -> None:
        """Until the client closed ``count`` connections in all (a server-side view)."""
        async with asyncio.timeout(timeout):
            while self.client_closed < count:
                self.client_closed_event.clear()
                await self.client_closed_event.wait()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()


@contextlib.asynccontextmanager
async def serving(handler: Handler = serve_forever, **server_kwargs: Any) -> AsyncIterator[Peer]:
    peer = await Peer(handler).start(**server_kwargs)
    try:
        yield peer
    finally:
        await peer.stop()


@contextlib.asynccontextmanager
async def pool_of(**kwargs: Any) -> AsyncIterator[UpstreamPool]:
    """An ``UpstreamPool`` (connect timeout 5 s unless given), closed at the end."""
    kwargs.setdefault("connect_timeout", 5.0)
    pool = UpstreamPool(**kwargs)
    try:
        yield pool
    finally:
        await pool.close()


@contextlib.asynccontextmanager
async def key_quoting_engine() -> AsyncIterator[str]:
    """An engine that answers with a broken status line quoting the request's
    ``Authorization`` value (the HTTP client's error then quotes it); yields its URL."""

    async def quote_the_key(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        line = next(h for h in head.split(b"\r\n") if h.lower().startswith(b"authorization:"))
        writer.write(b"HTTP/1.1 2x0 " + line[14:].strip() + b"\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(quote_the_key, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        await server.wait_closed()
