"""Refuse a form posted from another site, before any credential or token is looked at.

    if not same_site(request): answer 403

A browser marks where a request comes from: ``Sec-Fetch-Site`` (``same-origin``
or ``none`` for a typed address are accepted; ``same-site`` and
``cross-site`` are not, since another port or subdomain is another origin)
decides when present; without it (an older browser) ``Origin`` must name this
host, as the request's ``Host`` header does, so the check holds behind a
TLS-terminating proxy that keeps ``Host`` (``null`` is refused). A request with
neither header (curl, a script) passes: it carries no browser's cookies by
accident, and a session still needs its CSRF token.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.requests import Request

__all__ = ["same_site"]


def same_site(request: Request) -> bool:
    """True unless the browser says the request comes from another origin."""
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None:  # set by the browser, never by a page: it decides
        return fetch_site in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None:
        return True
    host = request.headers.get("host")
    if not host or origin == "null":
        return False
    try:
        netloc = urlsplit(origin).netloc
    except ValueError:
        return False
    return netloc.lower() == host.lower()
