"""The security headers of every web response, added by one ASGI wrapper.

A header the page already set wins (a claim page sets ``Referrer-Policy:
no-referrer`` and ``X-Robots-Tag``); the rest are added to every response,
error pages and the stylesheet included, so a page cannot leave one out.

``Content-Security-Policy`` allows no script at all and styles only from the
gateway's own stylesheet; the charts are inline SVG drawn with presentation
attributes, which the policy does not govern. ``Cache-Control: no-store`` is
the default for every page (they show who is signed in, keys and spend); the
stylesheet sets its own.
"""

from __future__ import annotations

from fairgate.core.asgi import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CSP", "SECURITY_HEADERS", "SecurityHeaders"]

CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)

SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
)


class SecurityHeaders:
    """Wraps an ASGI app: every ``http.response.start`` gets the headers it lacks."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                present = {name.lower() for name, _ in headers}
                headers.extend(h for h in SECURITY_HEADERS if h[0] not in present)
                message = {**message, "headers": headers}
            await send(message)

        await self._app(scope, receive, with_headers)
