"""The HTTP client the gateway talks to engines with: one shared keep-alive pool.

One ``aiohttp.ClientSession`` over one ``TCPConnector`` serves every replica
(connections are pooled per host and port, kept alive between requests). It
is configured for a proxy, not for a browser:

- ``trust_env=False``: ``HTTP(S)_PROXY``, ``NO_PROXY`` and ``.netrc`` are
  ignored; upstream URLs come from the configuration only;
- redirects are never followed: ``request``/``send`` always pass
  ``allow_redirects=False``, so a 3xx reaches the proxy as an answer and the
  internal key is never sent to a location an engine names;
- ``auto_decompress=False``: bodies are relayed as the engine sent them
  (the adapters ask for ``accept-encoding: identity`` anyway);
- no cookie jar, no automatic ``User-Agent``/``Accept``/``Accept-Encoding``/
  ``Content-Type``: the adapter's header list is all that is sent;
- ``raise_for_status=False``: an engine's 4xx/5xx is an answer to relay.

Timeouts: ``connect_timeout`` bounds establishing a connection; other
deadlines (headers, first token, idle, total) are the caller's, passed per
request as ``client_timeout`` (an ``aiohttp.ClientTimeout``) or enforced
around the read.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import aiohttp
from multidict import CIMultiDict
from yarl import URL

from fairgate.upstream.replica import Replica

__all__ = ["UpstreamSessions", "read_bounded"]

_NO_AUTO_HEADERS = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")


class UpstreamSessions:
    """Owns the shared client session; create inside a running event loop, ``close()`` at shutdown.

    ``limit_per_host`` caps open connections per engine host:port (0 = no cap).
    """

    def __init__(self, connect_timeout: float, limit_per_host: int = 0) -> None:
        if connect_timeout <= 0:
            raise ValueError("connect_timeout must be positive")
        self._connect_timeout = connect_timeout
        self._limit_per_host = limit_per_host
        self._session: aiohttp.ClientSession | None = None

    def session_for(self, replica: Replica) -> aiohttp.ClientSession:
        """The session to reach ``replica`` with (the same shared one for all of them).

        Callers that use it directly must pass ``allow_redirects=False``; prefer
        ``request``/``send``, which always do.
        """
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, limit_per_host=self._limit_per_host),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._connect_timeout),
                trust_env=False,
                auto_decompress=False,
                cookie_jar=aiohttp.DummyCookieJar(),
                raise_for_status=False,
                skip_auto_headers=_NO_AUTO_HEADERS,
            )
        return self._session

    async def send(
        self,
        replica: Replica,
        method: str,
        path: str,
        *,
        headers: Sequence[tuple[bytes, bytes]],
        data: bytes | None = None,
        client_timeout: aiohttp.ClientTimeout | None = None,
    ) -> aiohttp.ClientResponse:
        """Send one request to ``path`` on ``replica``; the caller must release the answer.

        ``headers`` is the complete list (from the adapter). Raises aiohttp's
        ``ClientError`` subclasses and ``TimeoutError`` on failure.
        """
        session = self.session_for(replica)
        header_map = CIMultiDict(
            (name.decode("latin-1"), value.decode("latin-1")) for name, value in headers
        )
        url = URL(replica.url_for(path), encoded=True)
        return await session.request(
            method,
            url,
            headers=header_map,
            data=data,
            allow_redirects=False,
            timeout=self._timeout(client_timeout),
        )

    def _timeout(self, timeout: aiohttp.ClientTimeout | None) -> aiohttp.ClientTimeout:
        # A per-request timeout replaces the session's whole; keep connect_timeout in it.
        if timeout is None:
            return aiohttp.ClientTimeout(total=None, sock_connect=self._connect_timeout)
        if timeout.sock_connect is None:
            return aiohttp.ClientTimeout(
                total=timeout.total,
                connect=timeout.connect,
                sock_read=timeout.sock_read,
                sock_connect=self._connect_timeout,
                ceil_threshold=timeout.ceil_threshold,
            )
        return timeout

    @asynccontextmanager
    async def request(
        self,
        replica: Replica,
        method: str,
        path: str,
        *,
        headers: Sequence[tuple[bytes, bytes]],
        data: bytes | None = None,
        client_timeout: aiohttp.ClientTimeout | None = None,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """``send`` as a context manager that releases the answer on exit."""
        response = await self.send(
            replica, method, path, headers=headers, data=data, client_timeout=client_timeout
        )
        try:
            yield response
        finally:
            response.release()

    async def close(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None


async def read_bounded(response: aiohttp.ClientResponse, limit: int) -> bytes | None:
    """The whole body of ``response`` if it is at most ``limit`` bytes, else ``None``."""
    body = bytearray()
    async for chunk in response.content.iter_chunked(64 * 1024):
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)
