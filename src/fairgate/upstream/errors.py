"""What can go wrong between the gateway and an engine, as the HTTP/1.1 client reports it.

    UpstreamError
    ├── UpstreamConnectError      refused, reset or unreachable while connecting; TLS failed
    │   └── UpstreamConnectTimeout    no connection within the pool's connect timeout
    ├── UpstreamProtocolError     malformed answer, head too large, connection closed
    │   │                         before a complete head or in the middle of the body
    │   └── UpstreamClosedBeforeAnswer   closed before the request was written (the
    │                                    pool sends it once more when it was reused)
    └── UpstreamTooLarge          ``read_all`` past its limit (the connection is closed)

Messages never hold a header value (an engine's answer may echo the internal key) nor
anything else the engine sent; the caller maps these to the gateway's own errors
(``fairgate.core.errors``: 502 or 504) and decides what may be retried elsewhere.
"""

from __future__ import annotations

__all__ = [
    "UpstreamClosedBeforeAnswer",
    "UpstreamConnectError",
    "UpstreamConnectTimeout",
    "UpstreamError",
    "UpstreamProtocolError",
    "UpstreamTooLarge",
]


class UpstreamError(Exception):
    """An engine could not be reached or answered outside HTTP/1.1 (see the module tree)."""


class UpstreamConnectError(UpstreamError):
    """No connection: refused, reset, unreachable, name not resolved or TLS handshake failed."""


class UpstreamConnectTimeout(UpstreamConnectError):
    """No connection within the connect timeout (not a ``TimeoutError``: the caller's own
    deadlines are those, and must not be confused with this one)."""


class UpstreamProtocolError(UpstreamError):
    """The answer broke HTTP/1.1 or was cut off; nothing after it on that connection counts."""


class UpstreamTooLarge(UpstreamError):
    """A body longer than the caller's limit."""


class UpstreamClosedBeforeAnswer(UpstreamProtocolError):
    """Closed or reset before the request was written, so the engine cannot have run it.
    On a reused connection this is the keep-alive race (the server closed it while idle
    as the request went out), which the pool retries once on a fresh connection; on a
    fresh one it reaches the caller. A close after the request went out whole is a plain
    ``UpstreamProtocolError``: the engine may have started on it, and nothing resends it."""
