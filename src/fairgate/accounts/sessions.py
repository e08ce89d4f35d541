"""Server-side web sessions in the store, so they work across replicas.

    opened = await sessions.open_account(account.id)     # a new id at every sign-in
    set_cookie(COOKIE, opened.cookie_value)               # Secure, HttpOnly, SameSite=Lax, Path=/
    view = await sessions.resolve(cookie_value)           # None: sign in again
    sessions.csrf_ok(view, form["csrf"])
    await sessions.close(cookie_value)                    # sign-out, at once

The cookie value is 256 random bits (``secrets.token_urlsafe(32)``); the store
keeps only its SHA-256, so a copy of the table opens no session. A session dies
``idle`` seconds after its last use or ``lifetime`` seconds after sign-in,
whichever comes first. ``resolve`` is one SELECT joining the account (or, for
an admin session, its user): an account that is not active, or a disabled
user, resolves to None on the next request. Use is recorded at most once per
``touch_every`` seconds (a write), so the idle timeout is exact to that much.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from fairgate.accounts import csrf
from fairgate.accounts.account import Account
from fairgate.accounts.errors import SignInRefused
from fairgate.core.clock import Clock
from fairgate.store import Store, accounts, from_unix, web_sessions
from fairgate.store.web_sessions import SessionRow

__all__ = ["COOKIE", "OpenedSession", "SessionView", "Sessions", "SsoBinding"]

COOKIE = "__Host-fairgate-session"
"""The cookie's name: the ``__Host-`` prefix makes browsers insist on Secure, Path=/ and no
Domain, so a sibling host cannot plant or read it."""

_COOKIE_VALUE = re.compile(r"[A-Za-z0-9_-]{43}")


@dataclass(frozen=True, slots=True)
class OpenedSession:
    """A new session: the cookie's value and the CSRF token are only ever here, in the clear."""

    cookie_value: str
    csrf_token: str
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class SsoBinding:
    """A role a person's claims gave at sign-in, on a scope named ``org`` or ``team`` (the
    root when both are None)."""

    role: str
    org: str | None = None
    team: str | None = None


@dataclass(frozen=True, slots=True)
class SessionView:
    """A live session. ``kind`` account: ``account`` is set (active); admin: ``actor_name``
    (``master-key`` or ``user:NAME``) and, for a user, ``user_id``."""

    kind: Literal["account", "admin"]
    account: Account | None
    actor_name: str | None
    user_id: int | None
    csrf_hash: bytes
    expires_at: datetime
    sso_roles: tuple[SsoBinding, ...] | None = None
    """For a single sign-on session (``fairgate.admin.sso``): the bindings its claims gave."""
    id_token_hint: str | None = None


class Sessions:
    """Open, resolve and close web sessions; ``idle`` and ``lifetime`` in seconds."""

    def __init__(
        self,
        store: Store,
        *,
        idle: float,
        lifetime: float,
        clock: Clock,
        touch_every: float = 60.0,
    ) -> None:
        self._store = store
        self._idle = timedelta(seconds=idle)
        self._lifetime = timedelta(seconds=lifetime)
        self._touch_every = timedelta(seconds=min(touch_every, idle / 2))
        self._clock = clock

    async def open_account(self, account_id: int) -> OpenedSession:
        """A new session for an account (a fresh id: the id a browser had before is not
        reused, so a planted id is worthless). SignInRefused when the account is no longer
        active or its user is disabled, checked under a lock in the insert's transaction:
        a sign-in racing a suspension leaves no session to come back at re-approval."""
        return await self._open(kind="account", account_id=account_id)

    async def open_admin(self, actor_name: str, user_id: int | None) -> OpenedSession:
        """A new admin session (the dashboard) for ``master-key`` or ``user:NAME``."""
        return await self._open(kind="admin", actor_name=actor_name, user_id=user_id)

    async def open_sso(
        self,
        actor_name: str,
        user_id: int | None,
        *,
        roles: tuple[SsoBinding, ...],
        id_token_hint: str,
        lifetime: float,
    ) -> OpenedSession:
        """A new admin session opened by single sign-on: ``roles`` are the bindings the
        person's claims gave (kept for the session's life), ``lifetime`` the configured
        ``sso.session_ttl`` (the idle timeout still applies)."""
        return await self._open(
            kind="admin",
            actor_name=actor_name,
            user_id=user_id,
            sso_roles=[{"role": r.role, "org": r.org, "team": r.team} for r in roles],
            id_token_hint=id_token_hint,
            lifetime=timedelta(seconds=lifetime),
        )

    async def resolve(self, cookie_value: str | None) -> SessionView | None:
        """The live session behind a cookie value, or None (unknown, malformed, idle or past
        its lifetime, account not active, user disabled)."""
        if cookie_value is None or not _COOKIE_VALUE.fullmatch(cookie_value):
            return None
        now = self._now()
        key = csrf.digest(cookie_value)
        async with self._store.read() as conn:
            row = await web_sessions.resolve(conn, key, now=now, idle_since=now - self._idle)
        if row is None:
            return None
        if now - row.seen_at >= self._touch_every:
            async with self._store.write() as conn:
                await web_sessions.touch(conn, key, now)
        return _view(row)

    async def close(self, cookie_value: str) -> None:
        """End the session at once (sign-out); an unknown value changes nothing."""
        async with self._store.write() as conn:
            await web_sessions.close(conn, csrf.digest(cookie_value))

    async def close_account(self, account_id: int) -> int:
        """End every session of an account; how many there were."""
        async with self._store.write() as conn:
            return await web_sessions.close_all(conn, account_id)

    async def prune(self) -> int:
        """Delete the sessions past either timeout; how many."""
        now = self._now()
        async with self._store.write() as conn:
            return await web_sessions.prune(conn, now=now, idle_since=now - self._idle)

    @staticmethod
    def csrf_token(cookie_value: str) -> str:
        """The CSRF token of a session, to render in its forms (``fairgate.accounts.csrf``)."""
        return csrf.csrf_token(cookie_value)

    @staticmethod
    def csrf_ok(view: SessionView, token: str | None) -> bool:
        """Whether a submitted CSRF token is the session's (constant time vs the stored hash)."""
        return csrf.matches(view.csrf_hash, token)

    async def _open(
        self,
        *,
        kind: Literal["account", "admin"],
        account_id: int | None = None,
        actor_name: str | None = None,
        user_id: int | None = None,
        sso_roles: list[dict[str, str | None]] | None = None,
        id_token_hint: str | None = None,
        lifetime: timedelta | None = None,
    ) -> OpenedSession:
        cookie_value = secrets.token_urlsafe(32)
        token = csrf.csrf_token(cookie_value)
        now = self._now()
        expires_at = now + (self._lifetime if lifetime is None else lifetime)
        async with self._store.write() as conn:
            if account_id is not None and not await accounts.lock_if_active(conn, account_id):
                raise SignInRefused()
            await web_sessions.insert_session(
                conn,
                id_sha256=csrf.digest(cookie_value),
                kind=kind,
                csrf_sha256=csrf.digest(token),
                now=now,
                expires_at=expires_at,
                account_id=account_id,
                actor_name=actor_name,
                user_id=user_id,
                sso_roles=sso_roles,
                id_token_hint=id_token_hint,
            )
        return OpenedSession(cookie_value=cookie_value, csrf_token=token, expires_at=expires_at)

    def _now(self) -> datetime:
        return from_unix(self._clock.wall())


def _view(row: SessionRow) -> SessionView:
    account = None
    if row.kind == "account":
        assert row.account_id is not None and row.email is not None and row.state is not None
        assert row.account_created_at is not None
        account = Account(
            id=row.account_id,
            email=row.email,
            state=row.state,
            user_id=row.account_user_id,
            team=row.team,
            created_at=row.account_created_at,
        )
    return SessionView(
        kind=row.kind,
        account=account,
        actor_name=row.actor_name,
        user_id=row.user_id,
        csrf_hash=row.csrf_sha256,
        expires_at=row.expires_at,
        sso_roles=None
        if row.sso_roles is None
        else tuple(
            SsoBinding(role=str(r["role"]), org=r.get("org"), team=r.get("team"))
            for r in row.sso_roles
        ),
        id_token_hint=row.id_token_hint,
    )
