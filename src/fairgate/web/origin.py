"""Refusing a state-changing request that another site made the browser send.

A browser marks where a request came from: ``Sec-Fetch-Site`` (every current
browser) and ``Origin`` (on every POST). A POST is refused when

- ``Sec-Fetch-Site`` is present and is neither ``same-origin`` nor ``none``
  (``cross-site``, and also ``same-site``: a sibling subdomain is another site), or
- ``Origin`` is present and is not the gateway's own origin (``null`` included),
  except ``null`` with ``Sec-Fetch-Site: same-origin``: a browser sends
  ``Origin: null`` for a form posted from a page under ``Referrer-Policy:
  no-referrer`` (the claim page's policy), and ``Sec-Fetch-Site`` is a header no
  page can set, so it vouches for the request then.

A request with neither header is not refused here (a client that is not a
browser, or a very old one); it still needs the form's CSRF token
(``fairgate.web.csrf``), which a page of another site cannot read.

The gateway's own origin is ``public_url``'s when configured; otherwise the
scheme the client used (``X-Forwarded-Proto`` when the connection comes from a
trusted proxy, else the listener's) and the ``Host`` header. A forged ``Host``
cannot help a cross-site page: the browser sets ``Host`` to the gateway and
``Origin`` to the page.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.requests import Request

from fairgate.core.client_addr import ClientAddresses

__all__ = ["Origins"]

_ALLOWED_FETCH_SITES = frozenset({"same-origin", "none"})


class Origins:
    """The gateway's own origin and the cross-site check (stateless after construction)."""

    def __init__(self, clients: ClientAddresses, public_url: str | None = None) -> None:
        self._clients = clients
        self._public_url = public_url.rstrip("/") if public_url else None
        self._public_origin = _origin_of(public_url) if public_url else None

    def address(self, request: Request) -> str:
        """The client's address, resolved through ``trusted_proxies``."""
        peer = request.client.host if request.client else ""
        return self._clients.of(peer, request.scope["headers"])

    def scheme(self, request: Request) -> str:
        """``https`` or ``http``: what the browser used, as far as the gateway can tell."""
        peer = request.client.host if request.client else ""
        trusted = self._clients.trusted
        if trusted and trusted.holds(peer):
            forwarded = request.headers.get("x-forwarded-proto", "").split(",")[-1].strip()
            if forwarded in ("http", "https"):
                return forwarded
        return request.url.scheme

    def base_url(self, request: Request) -> str:
        """The gateway's address as a caller reaches it (``public_url`` when configured)."""
        if self._public_url is not None:
            return self._public_url
        return self.origin(request)

    def origin(self, request: Request) -> str:
        """The gateway's own origin (scheme://host[:port]) for this request."""
        if self._public_origin is not None:
            return self._public_origin
        return f"{self.scheme(request)}://{request.headers.get('host', 'localhost')}"

    def cross_site(self, request: Request) -> str | None:
        """Why the request looks cross-site (for the server log), or None when it does not."""
        fetch_site = request.headers.get("sec-fetch-site")
        if fetch_site is not None and fetch_site not in _ALLOWED_FETCH_SITES:
            return f"Sec-Fetch-Site {fetch_site!r}"
        origin = request.headers.get("origin")
        own = self.origin(request)
        if origin is not None and origin.lower() != own.lower():
            if origin == "null" and fetch_site == "same-origin":
                return None  # a form of our own no-referrer page (the claim page)
            return f"Origin {origin!r} is not {own!r}"
        return None


def _origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"
