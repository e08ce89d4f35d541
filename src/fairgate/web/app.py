"""The web pages as one ASGI application, mounted on the client listener by ``ProxyApp``.

    request → NetworkGate (routes.web) → SecurityHeaders → Starlette router → a page

``build_web`` is what ``fairgate.app`` calls: it returns the ``Mount`` (the
application and the exact paths it owns, ``fairgate.web.paths``) or None when
``web.enabled`` is false.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from fairgate.accounts import Accounts, Sessions
from fairgate.config import Config
from fairgate.core.asgi import ASGIApp, Mount, Receive, Scope, Send
from fairgate.core.client_addr import ClientAddresses
from fairgate.core.clock import Clock
from fairgate.core.route_classes import RouteRules
from fairgate.tenancy import Tenancy
from fairgate.web.account import AccountPages
from fairgate.web.claim import ClaimPages
from fairgate.web.csrf import FormTokens
from fairgate.web.errors import PageError, error_handlers, failure_page
from fairgate.web.headers import SecurityHeaders
from fairgate.web.landing import LandingPage
from fairgate.web.origin import Origins
from fairgate.web.paths import EXACT, PREFIXES
from fairgate.web.render import Pages
from fairgate.web.signin import SignPages
from fairgate.web.site import Site
from fairgate.web.static_files import Stylesheet
from fairgate.web.visitor import Visitors

__all__ = ["NetworkGate", "build_web"]

log = logging.getLogger("fairgate.web")

Handler = Callable[[Request], Awaitable[Response]]


def build_web(
    config: Config,
    *,
    clients: ClientAddresses,
    rules: RouteRules,
    tenancy: Tenancy,
    accounts: Accounts,
    sessions: Sessions,
    clock: Clock,
) -> Mount | None:
    """The web pages of ``config`` (None when ``web.enabled`` is false)."""
    if not config.web.enabled:
        return None
    site = Site.of(config)
    pages = Pages({"name": site.name})
    origins = Origins(clients, site.public_url)
    landing = LandingPage(site, pages, origins)
    style = Stylesheet()
    forms = FormTokens()
    claim = ClaimPages(site, pages, origins, tenancy.claims, forms)
    visitors = Visitors(sessions, accounts, origins)
    sign = SignPages(site, pages, origins, forms, accounts, sessions, visitors, clock)
    account = AccountPages(site, pages, visitors, tenancy, tenancy.store, clock)
    get, post = ["GET", "HEAD"], ["POST"]
    routes: list[BaseRoute] = [
        Route("/signup", _guarded(pages, sign.signup_form), methods=get),
        Route("/signup", _guarded(pages, sign.signup), methods=post),
        Route("/signin", _guarded(pages, sign.signin_form), methods=get),
        Route("/signin", _guarded(pages, sign.signin), methods=post),
        Route("/signout", _guarded(pages, sign.signout), methods=post),
        Route("/account", _guarded(pages, account.get), methods=get),
        Route("/account/keys", _guarded(pages, account.create_key), methods=post),
        Route("/account/keys/{key_id}/revoke", _guarded(pages, account.revoke_key), methods=post),
        Route("/claim/{token}", _guarded(pages, claim.get), methods=get),
        Route("/claim/{token}", _guarded(pages, claim.post), methods=post),
        Route("/", _guarded(pages, landing.get), methods=get),
        Route("/static/style.css", _guarded(pages, style.get), methods=get),
    ]
    router = Starlette(routes=routes, exception_handlers=error_handlers(pages))  # type: ignore[arg-type]
    # no redirect from /account/ to /account: it would be built from the Host header and the
    # listener's scheme (http behind a TLS proxy); an unknown spelling is a 404 page
    router.router.redirect_slashes = False
    app: ASGIApp = SecurityHeaders(router)  # type: ignore[arg-type]
    return Mount(NetworkGate(app, pages, clients, rules), EXACT, PREFIXES)


def _guarded(pages: Pages, handler: Handler) -> Handler:
    """``handler`` whose unexpected errors become the 500 page (PageError and HTTP errors
    go on to their handlers)."""

    async def endpoint(request: Request) -> Response:
        try:
            return await handler(request)
        except (PageError, HTTPException):
            raise
        except Exception:  # one page for every unexpected failure, logged
            return failure_page(pages, request)

    return endpoint


class NetworkGate:
    """Refuses clients outside ``routes.web`` (403 page) before any page runs.

    The client is the address resolved through ``trusted_proxies``, as for every
    other route class (``fairgate.core.route_classes``).
    """

    def __init__(
        self, app: ASGIApp, pages: Pages, clients: ClientAddresses, rules: RouteRules
    ) -> None:
        self._app = app
        self._pages = pages
        self._clients = clients
        self._rules = rules if rules.restricts("web") else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._rules is not None and scope["type"] == "http":
            client = scope.get("client")
            peer = client[0] if client else ""
            address = self._clients.of(peer, scope["headers"])
            if not self._rules.allows("web", address):
                log.info("web %s refused: %s is outside routes.web", scope["path"], address)
                refused = self._pages.html(
                    "error.html",
                    status=403,
                    title="Forbidden",
                    message="This request is not allowed.",
                )
                await SecurityHeaders(_as_asgi(refused))(scope, receive, send)
                return
        await self._app(scope, receive, send)


def _as_asgi(response: Response) -> ASGIApp:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await response(scope, receive, send)  # type: ignore[arg-type]

    return app
