"""Who reads the dashboard: a bearer credential or an admin web session, resolved per request.

    access = Access(authenticator, tenancy, sessions)
    caller = await access.caller(request)     # DashboardCaller, or None: no credential

1. ``Authorization: Bearer <master key | fga-…>`` is checked exactly as the
   admin API checks it (``AdminAuthenticator``: the same failure counting, 401
   and 429, audit events). With the header, no cookie is read.
2. Otherwise the ``__Host-fairgate-session`` cookie of an **admin** session
   (opened by the sign-in form; an account's session from the web pages opens
   nothing here). Its actor is rebuilt on every request: ``master-key`` while the
   master key it was opened with is the one accepted (a rotated key ends it), a
   user from their current role bindings (a removed role applies at once; a
   disabled user has no session any more), or, for a single sign-on session, from
   its claims' bindings and the store roles of the user of the same name
   (``fairgate.admin.sso.actors``).
3. Neither: ``None`` (the page sends a browser to the sign-in form).
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from fairgate.accounts import COOKIE, Sessions
from fairgate.admin.authn import AdminAuthenticator
from fairgate.admin.sso.actors import SsoActors
from fairgate.core.errors import Unauthorized
from fairgate.tenancy import Actor, Tenancy

__all__ = ["Access", "DashboardCaller", "remote_of"]

MASTER_KEY_ACTOR = Actor.master_key().name


@dataclass(frozen=True, slots=True)
class DashboardCaller:
    """The actor of one dashboard request; ``csrf`` is the sign-out form's token (a web
    session's), None for a bearer credential."""

    actor: Actor
    csrf: str | None = None


def remote_of(request: Request) -> str:
    return request.client.host if request.client else "unknown"


class Access:
    """Resolves a dashboard request to its caller (see the module docstring); without
    ``sessions`` only bearer credentials work and there is no sign-in form."""

    def __init__(
        self,
        authenticator: AdminAuthenticator,
        tenancy: Tenancy,
        sessions: Sessions | None,
        sso: SsoActors | None = None,
    ) -> None:
        self.authenticator = authenticator
        self.sessions = sessions
        self.tenancy = tenancy
        self.sso = sso

    @property
    def sign_in_enabled(self) -> bool:
        return self.sessions is not None

    def unauthenticated(self) -> Unauthorized:
        return Unauthorized("sign in first", code="invalid_admin_credential")

    async def caller(self, request: Request) -> DashboardCaller | None:
        """The caller, None without any credential; raises what the authenticator raises."""
        header = request.headers.get("authorization")
        if header is not None:
            scheme, _, secret = header.partition(" ")
            presented = secret.strip() if scheme.lower() == "bearer" and secret.strip() else None
            actor = await self.authenticator.authenticate(presented, remote_of(request))
            return DashboardCaller(actor)
        return await self.session_caller(request)

    async def session_caller(self, request: Request) -> DashboardCaller | None:
        """The caller of the request's admin session cookie, None without a live one."""
        cookie = request.cookies.get(COOKIE)
        if self.sessions is None or cookie is None:
            return None
        view = await self.sessions.resolve(cookie)
        if view is None or view.kind != "admin":
            return None
        remote = remote_of(request)
        if view.sso_roles is not None:  # single sign-on; nothing once sso: is removed
            person = (view.actor_name or "").removeprefix("sso:")
            session_actor = (
                None if self.sso is None else await self.sso.actor(person, view.sso_roles, remote)
            )
        else:
            session_actor = await self._actor(view.actor_name, view.user_id, remote)
        if session_actor is None:
            return None
        return DashboardCaller(session_actor, csrf=Sessions.csrf_token(cookie))

    async def _actor(self, name: str | None, user_id: int | None, remote: str) -> Actor | None:
        if user_id is not None:
            return await self.tenancy.admin_tokens.actor_of(user_id, remote=remote)
        if name is not None and name == self.master_key_session_name():
            return Actor.master_key(remote)
        return None

    def master_key_session_name(self) -> str | None:
        """What a session opened with the master key accepted now records as its actor
        (``master-key@<mark>``); None without a master key. A session of an earlier
        master key no longer matches: rotating the key signs its sessions out."""
        mark = self.authenticator.master_key_mark()
        return None if mark is None else f"{MASTER_KEY_ACTOR}@{mark}"
