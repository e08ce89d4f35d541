"""``GET /admin/login``, ``GET /admin/callback``, ``GET /admin/session``, ``POST /admin/logout``.

    router = sso_router(client, actors, access, pages)     # only with an ``sso:`` block

``/admin/login`` starts a login (``fairgate.admin.sso.client``) and sends the browser
to the provider, with the login bound to it by the ``__Host-fairgate-sso`` cookie
(Secure, HttpOnly, SameSite=Lax so that it comes back on the provider's redirect,
Path=/, ten minutes). ``/admin/callback`` finishes it: the person's roles are the
``sso.role`` bindings their claims match plus the store roles of the user of the
same name; somebody with neither (or that user disabled) is refused here, 403, and
no session is opened. Otherwise an admin session is opened in the store
(``web_sessions``, kind ``admin``: every replica reads it), lasting
``sso.session_ttl``, in the ``__Host-fairgate-session`` cookie (Secure, HttpOnly,
SameSite=Lax: set on a redirect that began at the provider, Path=/), and the
browser goes to the dashboard. Every refusal is an HTML page with a generic
message; the reason is logged on the server.

``GET /admin/session`` answers the session's person, roles, expiry and CSRF token
(any admin session: the dashboard's sign-in too); ``POST /admin/logout`` needs
that token in ``X-CSRF-Token`` and no cross-site mark, ends the session in the
store at once and answers the provider's end-session URL (with the ID token as
``id_token_hint``) for the browser to visit, or null.
"""

from __future__ import annotations

import hmac
import logging
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from fairgate.accounts import COOKIE, Sessions
from fairgate.admin.dashboard.access import Access, remote_of
from fairgate.admin.dashboard.endpoints import error_page
from fairgate.admin.dashboard.origin import same_site
from fairgate.admin.dashboard.pages import Pages
from fairgate.admin.sso.actors import SsoActors
from fairgate.admin.sso.client import LOGIN_COOKIE, LOGIN_TTL, LoginFailed, SsoClient
from fairgate.admin.sso.provider import ProviderError
from fairgate.admin.sso.roles import claim_roles, person_of
from fairgate.core.errors import (
    Forbidden,
    RateLimited,
    ServiceUnavailable,
    StoreUnavailable,
    Unauthorized,
)

__all__ = ["sso_router"]

log = logging.getLogger("fairgate.admin")


def sso_router(client: SsoClient, actors: SsoActors, access: Access, pages: Pages) -> APIRouter:
    router = APIRouter(prefix="/admin", include_in_schema=False)
    sessions = access.sessions
    assert sessions is not None
    config = client.config

    @router.get("/login")
    async def login(request: Request) -> Response:
        try:
            url, cookie = await client.begin(remote_of(request))
        except (RateLimited, ServiceUnavailable) as exc:
            return error_page(pages, exc)
        except ProviderError as exc:
            log.error("sso: login not started: %s", exc)
            return error_page(pages, _provider_down())
        except StoreUnavailable as exc:
            log.error("sso: login not started: the store is unavailable: %s", exc)
            return error_page(pages, _store_down())
        answer = RedirectResponse(url, status_code=303)
        answer.set_cookie(
            LOGIN_COOKIE,
            cookie,
            max_age=int(LOGIN_TTL),
            path="/",
            secure=True,
            httponly=True,
            samesite="lax",
        )
        pages.secure(answer)
        return answer

    @router.get("/callback")
    async def callback(request: Request) -> Response:
        query = request.query_params
        remote = remote_of(request)
        if "error" in query:
            log.info("sso: the provider refused the login from %s: %s", remote, query["error"][:64])
            return _refused(pages, Unauthorized("the sign-in was not completed", code="sso_failed"))
        try:
            signed_in = await client.finish(
                request.cookies.get(LOGIN_COOKIE), query.get("state"), query.get("code")
            )
            person = person_of(signed_in.claims)
            if person is None:
                raise LoginFailed("no usable preferred_username, verified email or sub")
            roles = claim_roles(signed_in.claims, config.role)
            actor = await actors.actor(person, roles, remote)
            if actor is None:
                log.info(
                    "sso: %s from %s holds no role (claims nor store): refused", person, remote
                )
                return _refused(pages, _no_role())
            opened = await sessions.open_sso(
                f"sso:{person}",
                actor.user_id,
                roles=roles,
                id_token_hint=signed_in.id_token,
                lifetime=config.session_ttl,
            )
            old = request.cookies.get(COOKIE)
            if old is not None:  # of any kind (one cookie name): replaced in the browser
                await sessions.close(old)
        except LoginFailed as exc:
            log.info("sso: callback from %s refused: %s", remote, exc.reason)
            return _refused(pages, Unauthorized("the sign-in was not completed", code="sso_failed"))
        except StoreUnavailable as exc:
            log.error("sso: callback: the store is unavailable: %s", exc)
            return _refused(pages, _store_down())
        log.info("sso: %s signed in from %s as %s", person, remote, actor.name)
        answer = RedirectResponse("/admin/dashboard", status_code=303)
        answer.set_cookie(
            COOKIE,
            opened.cookie_value,
            expires=opened.expires_at,
            path="/",
            secure=True,
            httponly=True,
            samesite="lax",
        )
        _forget_login(answer)
        pages.secure(answer)
        return answer

    @router.get("/session")
    async def session(request: Request) -> Response:
        try:
            caller = await access.session_caller(request)
        except StoreUnavailable as exc:
            log.error("sso: session: the store is unavailable: %s", exc)
            raise _store_down() from None
        if caller is None:
            raise Unauthorized("no admin session; sign in at /admin/login", code="no_session")
        view = await sessions.resolve(request.cookies.get(COOKIE))
        body: dict[str, Any] = {
            "name": caller.actor.name,
            "roles": [_role(h.role, h.scope_kind, h.scope_id) for h in caller.actor.holds],
            "sso": view is not None and view.sso_roles is not None,
            "expires_at": None if view is None else view.expires_at.isoformat(),
            "csrf_token": caller.csrf,
        }
        return JSONResponse(body, headers={"cache-control": "no-store"})

    @router.post("/logout")
    async def logout(request: Request) -> Response:
        cookie = request.cookies.get(COOKIE)
        view = await sessions.resolve(cookie)
        if view is None or view.kind != "admin" or cookie is None:
            raise Unauthorized("no admin session", code="no_session")
        submitted = request.headers.get("x-csrf-token", "")
        expected = Sessions.csrf_token(cookie)
        if not same_site(request) or not hmac.compare_digest(submitted.encode(), expected.encode()):
            log.info("sso: logout refused from %s: no valid CSRF token", remote_of(request))
            raise Forbidden("send the session's X-CSRF-Token from this site", code="csrf")
        await sessions.close(cookie)
        url = (
            await client.end_session_url(view.id_token_hint) if view.sso_roles is not None else None
        )
        answer = JSONResponse({"end_session_url": url}, headers={"cache-control": "no-store"})
        answer.delete_cookie(COOKIE, path="/", secure=True, httponly=True, samesite="lax")
        return answer

    return router


def _role(role: str, kind: str, scope_id: int) -> dict[str, object]:
    return {"role": str(role), "scope_kind": kind, "scope_id": None if kind == "root" else scope_id}


def _refused(pages: Pages, exc: Unauthorized | Forbidden | ServiceUnavailable) -> Response:
    answer = error_page(pages, exc)
    _forget_login(answer)
    return answer


def _forget_login(answer: Response) -> None:
    answer.delete_cookie(LOGIN_COOKIE, path="/", secure=True, httponly=True, samesite="lax")


def _no_role() -> Forbidden:
    return Forbidden(
        "You signed in at your identity provider, but this gateway gives that account "
        "no administrator role. Ask the gateway's operator to grant one.",
        code="no_role",
    )


def _provider_down() -> ServiceUnavailable:
    return ServiceUnavailable(
        "the identity provider does not answer; try again", code="sso_unavailable"
    )


def _store_down() -> ServiceUnavailable:
    return ServiceUnavailable("the store is unavailable; try again", code="store_unavailable")
