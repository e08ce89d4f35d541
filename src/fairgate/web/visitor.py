"""Who is asking: the signed-in account behind the session cookie, and the form checks.

    visitor = await visitors.current(request)     # None: not signed in (or a dead session)
    visitors.check_form(request, visitor, form)   # PageError 403 unless same-site and its token

A session resolves only while it is live and its account active (one query,
``Sessions.resolve``): a suspended account or a closed session is signed out
on its very next request. An admin session (the dashboard's) is not a visitor
here. Every state-changing form carries the session's CSRF token
(``Sessions.csrf_token``, derived from the cookie), checked against the hash
the session holds; a request the browser marks cross-site is refused before.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from fairgate.accounts import COOKIE, Account, Accounts, Sessions, SessionView
from fairgate.core.errors import Forbidden
from fairgate.tenancy.actor import Actor
from fairgate.web.errors import PageError
from fairgate.web.forms import Form
from fairgate.web.origin import Origins

__all__ = ["Visitor", "Visitors"]


@dataclass(frozen=True, slots=True)
class Visitor:
    """A signed-in person: the account, its tenancy actor, the session's CSRF token."""

    account: Account
    actor: Actor
    cookie_value: str
    csrf: str
    session: SessionView


class Visitors:
    """Resolves sessions and checks forms (holds no state of its own)."""

    def __init__(self, sessions: Sessions, accounts: Accounts, origins: Origins) -> None:
        self._sessions = sessions
        self._accounts = accounts
        self._origins = origins

    async def current(self, request: Request) -> Visitor | None:
        """The signed-in account of the request's session cookie, or None."""
        cookie = request.cookies.get(COOKIE)
        view = await self._sessions.resolve(cookie)
        if view is None or cookie is None or view.kind != "account" or view.account is None:
            return None
        if view.account.user_id is None:
            return None  # not approved: cannot be (resolve keeps active accounts only)
        try:
            actor = await self._accounts.actor(view.account)
        except Forbidden:
            return None  # suspended or its user disabled since the session was read
        actor = Actor(
            name=actor.name,
            user_id=actor.user_id,
            holds=actor.holds,
            remote=self._origins.address(request),
        )
        return Visitor(view.account, actor, cookie, self._sessions.csrf_token(cookie), view)

    def same_site(self, request: Request) -> None:
        """PageError 403 when the browser marks the request as another site's."""
        why = self._origins.cross_site(request)
        if why is not None:
            raise PageError(403, f"refused: {why}")

    def check_form(self, request: Request, visitor: Visitor, form: Form) -> None:
        """PageError 403 unless the request is same-site and carries the session's token."""
        self.same_site(request)
        if not self._sessions.csrf_ok(visitor.session, form.get("csrf")):
            raise PageError(
                403,
                "form without the session's CSRF token",
                message="This form has expired. Reload the page and try again.",
            )
