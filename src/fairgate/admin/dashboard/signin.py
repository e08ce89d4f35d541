"""``GET/POST /admin/signin`` and ``POST /admin/signout``: an admin web session for a browser.

    router = signin_router(pages, tenancy, access)    # only with web sessions

The form posts the master key or an admin token in its body (never in an
address, so it reaches no log, history or Referer). The secret is checked by
the admin API's own ``AdminAuthenticator``: the master key first and in
constant time, a token when the admin listener's guard admits the lookup; every
refusal is one failure of the client's network (a 401 page, 429 with
``Retry-After`` once the network is over the limits, as a bearer spray gets)
and one ``auth.failed`` audit event while within them. A credential that reads
no fair-share standings (``GET /admin/fairshare``'s rule) opens nothing (403).

Success opens an admin session (``Sessions.open_admin``: a fresh id, stored
as its hash) in the ``__Host-fairgate-session`` cookie: Secure, HttpOnly,
SameSite=Strict, Path=/, expiring with the session's lifetime. Sign-out needs
the session's CSRF token (in the page's sign-out form) and ends the session in
the store at once, so the old cookie is dead. The web front door's account sessions
share the cookie's name: a sign-in here closes the session the browser's cookie named
before, whatever its kind, and a sign-out closes an account's session the cookie
names too, since the browser drops it either way; a single sign-on session's sign-out
answers a page linking to the provider's end-session URL (``end_session``), since
the gateway's session ending does not end the provider's. Both forms are refused from
another site (``fairgate.admin.dashboard.origin``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from fairgate.accounts import COOKIE
from fairgate.admin.dashboard.access import Access, remote_of
from fairgate.admin.dashboard.endpoints import error_page
from fairgate.admin.dashboard.origin import same_site
from fairgate.admin.dashboard.pages import Pages
from fairgate.admin.fairshare import visible_orgs
from fairgate.core.errors import Forbidden, GatewayError, StoreUnavailable, Unauthorized

__all__ = ["MAX_SECRET", "signin_router"]

log = logging.getLogger("fairgate.admin")

MAX_SECRET = 512
"""Longest secret the form takes (the master key file's value, an ``fga-`` token)."""


EndSession = Callable[[str | None], Awaitable[str | None]]
"""The provider's end-session URL for a session's ID token (``SsoClient.end_session_url``)."""


def signin_router(pages: Pages, access: Access, end_session: EndSession | None = None) -> APIRouter:
    router = APIRouter(prefix="/admin", include_in_schema=False)
    sessions = access.sessions
    assert sessions is not None
    tenancy = access.tenancy

    def form(status: int = 200, message: str | None = None, **headers: str) -> Response:
        return pages.render(
            "signin.html",
            status=status,
            message=message,
            headers=headers,
            sso=access.sso is not None,
        )

    @router.get("/signin")
    async def show(request: Request) -> Response:
        return form()

    @router.post("/signin")
    async def sign_in(request: Request) -> Response:
        if not same_site(request):
            log.info("dashboard: sign-in refused: posted from another site")
            return error_page(pages, Forbidden("sign in from this page", code="cross_site"))
        fields = await request.form()
        secret = fields.get("secret")
        presented = secret if isinstance(secret, str) and 0 < len(secret) <= MAX_SECRET else None
        try:
            actor = await access.authenticator.authenticate(presented, remote_of(request))
            await visible_orgs(tenancy, actor)
            name = actor.name
            if actor.user_id is None:  # the master key: the session dies with this key
                name = access.master_key_session_name() or name
            opened = await sessions.open_admin(name, actor.user_id)
            old = request.cookies.get(COOKIE)
            if old is not None:  # of any kind: the new cookie replaces it in the browser
                await sessions.close(old)
        except Unauthorized:
            return form(401, "That key was not accepted.")
        except GatewayError as exc:
            log.info("dashboard: sign-in refused: %s", exc.message)
            return error_page(pages, exc)
        except StoreUnavailable as exc:
            log.error("dashboard: sign-in: the store is unavailable: %s", exc)
            return form(503, "The gateway's store does not answer; try again.")
        log.info("dashboard: %s signed in from %s", actor.name, remote_of(request))
        answer = RedirectResponse("/admin/dashboard", status_code=303)
        answer.set_cookie(
            COOKIE,
            opened.cookie_value,
            expires=opened.expires_at,
            path="/",
            secure=True,
            httponly=True,
            samesite="strict",
        )
        pages.secure(answer)
        return answer

    @router.post("/signout")
    async def sign_out(request: Request) -> Response:
        if not same_site(request):
            log.info("dashboard: sign-out refused: posted from another site")
            return error_page(pages, Forbidden("sign out from this page", code="cross_site"))
        cookie = request.cookies.get(COOKIE)
        fields = await request.form()
        token = fields.get("csrf")
        try:
            view = await sessions.resolve(cookie) if cookie is not None else None
            if view is not None and view.kind == "admin":
                if not sessions.csrf_ok(view, token if isinstance(token, str) else None):
                    log.info("dashboard: sign-out refused: no valid form token")
                    return error_page(pages, Forbidden("sign out from this page", code="csrf"))
                assert cookie is not None
                await sessions.close(cookie)
            elif cookie is not None:  # a web account's session (one cookie name): dropped too
                await sessions.close(cookie)
        except StoreUnavailable as exc:
            log.error("dashboard: sign-out: the store is unavailable: %s", exc)
            return form(503, "The gateway's store does not answer; try again.")
        url = None
        if end_session is not None and view is not None and view.sso_roles is not None:
            url = await end_session(view.id_token_hint)
        answer: Response
        if url is None:
            answer = RedirectResponse("/admin/signin", status_code=303)
            pages.secure(answer)
        else:  # a page, not a redirect: form-action 'self' forbids one to the provider
            answer = pages.render("signedout.html", end_session_url=url)
        answer.delete_cookie(COOKIE, path="/", secure=True, httponly=True, samesite="strict")
        return answer

    return router
