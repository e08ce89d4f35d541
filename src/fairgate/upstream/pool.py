"""Keep-alive connections to engines, per host and port, for the gateway's HTTP/1.1 client.

    pool = UpstreamPool(connect_timeout=5.0)           # inside the running loop
    response = await pool.request("POST", "10.0.0.11", 8000, b"/v1/chat/completions",
                                  [(b"content-type", b"application/json")], body)
    while chunk := await response.read_chunk():
        ...
    response.release()                                 # or close() to abandon it
    await pool.close()                                 # at shutdown

Idle connections are reused last-in first-out (the warmest first; the oldest age out),
at most ``max_idle_per_host`` per (host, port, tls), each closed after ``idle_timeout``
seconds unused. A connection the server closes while idle is dropped as soon as the event
loop sees it, or at the latest when it is taken for a request (its socket is polled
first). A request is sent once more, on a fresh connection, only when the reused
connection is known to have closed before the request was written (the write itself
failed): never once the request went out whole, since the server may have read it and
started a generation, never after a byte of the answer, never when the connection was
fresh. The number of connections in use is not capped here: the gateway's admission
bounds the requests in flight.

No environment variable is read (no proxies, no ``.netrc``) and no redirect is followed:
a 3xx is an answer like any other.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import Sequence

from fairgate.upstream.errors import (
    UpstreamClosedBeforeAnswer,
    UpstreamConnectError,
    UpstreamConnectTimeout,
)
from fairgate.upstream.http1 import Http1Connection
from fairgate.upstream.request_head import RequestHeadEncoder
from fairgate.upstream.response import UpstreamResponse

__all__ = ["UpstreamPool"]


class UpstreamPool:
    """HTTP/1.1 client connections to engines; one per Gateway.

    It binds to the event loop of its first connection (it may be built before the loop
    runs) and is closed with ``await close()`` at shutdown. Times are
    seconds: ``connect_timeout`` > 0 bounds the TCP connect and the TLS handshake together;
    ``idle_timeout`` > 0; ``max_idle_per_host`` ≥ 0 (0 keeps no connection alive);
    ``max_response_head_bytes`` bounds an answer's status line and headers. TLS requests
    verify the engine's certificate against ``ssl_context`` (default: the system's trust
    store, hostname checked). Deadlines after the connect (headers, first byte, idle,
    total) are the caller's: wrap the awaits in ``asyncio.timeout``; a cancelled await
    closes its connection.
    """

    def __init__(
        self,
        *,
        connect_timeout: float,
        max_idle_per_host: int = 64,
        idle_timeout: float = 30.0,
        max_response_head_bytes: int = 64 * 1024,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if connect_timeout <= 0 or idle_timeout <= 0:
            raise ValueError("connect_timeout and idle_timeout must be positive")
        if max_idle_per_host < 0 or max_response_head_bytes < 1:
            raise ValueError("max_idle_per_host must be >= 0, max_response_head_bytes >= 1")
        self._loop: asyncio.AbstractEventLoop | None = None
        self.connect_timeout = connect_timeout
        self.max_idle_per_host = max_idle_per_host
        self.idle_timeout = idle_timeout
        self.max_response_head_bytes = max_response_head_bytes
        self._ssl_context = ssl_context
        self._sites: dict[tuple[str, int, bool], _Site] = {}
        self._heads = RequestHeadEncoder()
        self._sweep: asyncio.TimerHandle | None = None
        self.closed = False

    async def request(
        self,
        method: str,
        host: str,
        port: int,
        target: bytes,
        headers: Sequence[tuple[bytes, bytes]],
        body: bytes,
        *,
        tls: bool = False,
    ) -> UpstreamResponse:
        """Send one request and return once the answer's status and headers are in.

        ``target`` is the path and query as sent (``/v1/chat/completions``); ``headers``
        go out exactly as given, plus ``host`` if absent and ``content-length`` (see
        ``RequestHeadEncoder``, which raises ``ValueError`` for unsafe ones). Raises
        ``UpstreamConnectError`` (``UpstreamConnectTimeout``) and
        ``UpstreamProtocolError``; the caller must ``release()`` or ``close()`` the answer.
        """
        if self.closed:
            raise RuntimeError("the upstream pool is closed")
        site = self._sites.get((host, port, tls)) or self._site(host, port, tls)
        head, close = self._heads.encode(method, target, headers, site.host_header, len(body))
        is_head = method == "HEAD"
        conn = site.take()
        if conn is not None:
            try:
                return await conn.send(head, body, is_head=is_head, close=close)
            except UpstreamClosedBeforeAnswer:
                pass  # closed before the request went out: once more, on a fresh connection
        conn = await self._connect(site)
        return await conn.send(head, body, is_head=is_head, close=close)

    def idle_connections(self) -> int:
        """Connections kept open for reuse now, over all hosts."""
        return sum(len(site.idle) for site in self._sites.values())

    async def close(self) -> None:
        """Close every idle connection; answers still being read are closed on release."""
        self.closed = True
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for site in self._sites.values():
            while site.idle:
                site.idle.pop().close()
        await asyncio.sleep(0)  # let the transports finish closing

    def _site(self, host: str, port: int, tls: bool) -> _Site:
        site = _Site(self, host, port, tls)
        self._sites[(host, port, tls)] = site
        return site

    async def _connect(self, site: _Site) -> Http1Connection:
        context: ssl.SSLContext | None = None
        if site.tls:
            if self._ssl_context is None:
                self._ssl_context = ssl.create_default_context()
            context = self._ssl_context
        loop = self._loop = self._loop or asyncio.get_running_loop()
        made: list[Http1Connection] = []

        def protocol() -> Http1Connection:
            made.append(site.new_connection())
            return made[-1]

        where = f"{site.host}:{site.port}"
        try:
            try:
                async with asyncio.timeout(self.connect_timeout):
                    await loop.create_connection(
                        protocol,
                        site.host,
                        site.port,
                        ssl=context,
                        server_hostname=site.host if context else None,
                    )
            except TimeoutError:
                raise UpstreamConnectTimeout(
                    f"no connection to {where} within {self.connect_timeout:g}s"
                ) from None
            except ssl.SSLError as exc:
                raise UpstreamConnectError(f"TLS with {where} failed: {exc.reason}") from None
            except OSError as exc:
                reason = exc.strerror or type(exc).__name__
                raise UpstreamConnectError(f"could not connect to {where}: {reason}") from None
        except BaseException:
            # Cancelled (or timed out) just as the connection was made: it must not leak.
            for conn in made:
                conn.abort()
            raise
        return made[-1]

    def _now(self) -> float:
        assert self._loop is not None  # bound by the first connection
        return self._loop.time()

    def _arm_sweep(self) -> None:
        if self._sweep is None and not self.closed:
            self._sweep = self._call_at(self._now() + self.idle_timeout)

    def _call_at(self, when: float) -> asyncio.TimerHandle:
        assert self._loop is not None
        return self._loop.call_at(when, self._expire_idle)

    def _expire_idle(self) -> None:
        self._sweep = None
        now = self._now()
        oldest: float | None = None
        for site in self._sites.values():
            idle = site.idle
            # Oldest first on the left: reuse takes from the right.
            while idle and idle[0].idle_since + self.idle_timeout <= now:
                idle.popleft().close()
            if idle and (oldest is None or idle[0].idle_since < oldest):
                oldest = idle[0].idle_since
        if oldest is not None:
            self._sweep = self._call_at(oldest + self.idle_timeout)


class _Site:
    """The idle connections to one (host, port, tls), and the Host header it gets."""

    __slots__ = ("host", "host_header", "idle", "pool", "port", "tls")

    def __init__(self, pool: UpstreamPool, host: str, port: int, tls: bool) -> None:
        self.pool = pool
        self.host = host
        self.port = port
        self.tls = tls
        self.idle: deque[Http1Connection] = deque()
        name = host.encode("ascii") if host.isascii() else host.encode("idna")
        if b":" in name:  # an IPv6 literal
            name = b"[" + name + b"]"
        self.host_header = name if port == (443 if tls else 80) else b"%s:%d" % (name, port)

    def new_connection(self) -> Http1Connection:
        pool = self.pool
        return Http1Connection(self, asyncio.get_running_loop(), pool.max_response_head_bytes)

    def take(self) -> Http1Connection | None:
        idle = self.idle
        while idle:
            conn = idle.pop()
            if conn.reusable:
                return conn
            conn.close()
        return None

    def reuse(self, conn: Http1Connection) -> None:
        pool = self.pool
        if pool.closed or pool.max_idle_per_host == 0:
            conn.close()
            return
        if len(self.idle) >= pool.max_idle_per_host:
            self.idle.popleft().close()  # the oldest is the likeliest to be closed soon
        conn.idle_since = pool._now()
        self.idle.append(conn)
        pool._arm_sweep()

    def lost(self, conn: Http1Connection) -> None:
        if conn in self.idle:  # else taken or expired meanwhile
            self.idle.remove(conn)
