"""Users of the admin API: created by a proxy admin (any organisation) or an org admin (theirs).

A user belongs to at most one organisation (the one whose admins manage the
account); their role bindings may reach further, granted by whoever
administers each scope. Disabling a user revokes their admin tokens at once
(each with its ``admin_token.revoked`` event);
keys they own keep working until revoked (they belong to the team). Enabling
brings the account back without its tokens: it needs a new one. Both need
authority over every role the user holds (``Scope.users_write``), so an org
admin cannot disable a proxy admin whose home is its organisation.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncConnection

from fairgate.store import StoreConflict, admin_tokens, orgs, users, web_sessions
from fairgate.store.users import User
from fairgate.tenancy.actor import Actor
from fairgate.tenancy.base import Service
from fairgate.tenancy.errors import BadRequest, Conflict, Forbidden, NotFound, no_user
from fairgate.tenancy.names import check_name

__all__ = ["Users"]


class Users(Service):
    """List, create, disable and enable users within the actor's scope.

    Errors: Forbidden for an actor that administers no organisation, NotFound
    for an organisation or user it cannot see, Conflict for a taken name.
    """

    async def list(self, actor: Actor) -> Sequence[User]:
        async with self._store.read() as conn:
            return await users.list_users(conn, self._scope(actor).users_read())

    async def get(self, actor: Actor, name: str) -> User:
        async with self._store.read() as conn:
            user = await users.by_name(conn, name, self._scope(actor).users_read())
        if user is None:
            raise no_user()
        return user

    async def create(self, actor: Actor, name: str, *, org: str | None = None) -> User:
        check_name("user", name)
        if not actor.root_admin and not actor.admin_orgs:
            raise Forbidden("creating users needs org_admin or proxy_admin", code="forbidden")
        now = self._now()
        try:
            async with self._store.write() as conn:
                org_id = await self._home(conn, actor, org)
                if await users.namesake(conn, name):
                    # taken in every case: a disabled "Alice" refuses "alice" at single
                    # sign-on, so a case variant would let its creator lock the other out
                    raise Conflict(f"user {name!r} exists", code="user_exists")
                user = await users.insert_user(conn, name=name, org_id=org_id, now=now)
                await self._audit(
                    conn, actor, "user.created", now, target=f"user:{name}", org_id=org_id
                )
        except StoreConflict:
            raise Conflict(f"user {name!r} exists", code="user_exists") from None
        return user

    async def disable(self, actor: Actor, name: str) -> User:
        """Disable a user, revoke their admin tokens and delete their sessions (admin,
        single sign-on, the bound web account's); disabling twice is a no-op."""
        return await self._switch(actor, name, enabled=False)

    async def enable(self, actor: Actor, name: str) -> User:
        """Enable a disabled user again; the admin tokens revoked and the sessions ended at
        disable stay so."""
        return await self._switch(actor, name, enabled=True)

    async def _switch(self, actor: Actor, name: str, *, enabled: bool) -> User:
        """Disable or enable within ``Scope.users_write``: the UPDATE carries the rule.

        NotFound for a user the actor cannot read; Forbidden for one it reads but
        has no authority over (not its organisation's, or holding a role it could
        not grant); a user already in the wanted state comes back unchanged.
        """
        scope = self._scope(actor)
        now = self._now()
        verb = "enabling" if enabled else "disabling"
        async with self._store.write() as conn:
            visible = await users.by_name(conn, name, scope.users_read())
            if visible is None:
                raise no_user()
            where = scope.users_write()
            live = [] if enabled else await admin_tokens.live_tokens(conn, name)
            changed = (
                await users.enable(conn, name, where)
                if enabled
                else await users.disable(conn, name, now, where)
            )
            if changed is None:
                if (visible.disabled_at is None) == enabled and await users.by_name(
                    conn, name, where
                ):
                    return visible
                raise Forbidden(
                    f"{verb} user {name!r} needs org_admin of their organisation and the "
                    "right to grant every role they hold",
                    code="forbidden",
                )
            if not enabled:  # ended, not suspended: enabling again revives none of them
                await web_sessions.close_user(conn, visible.id, name)
            action = "user.enabled" if enabled else "user.disabled"
            await self._audit(
                conn, actor, action, now, target=f"user:{name}", org_id=visible.org_id
            )
            for token in live:  # each a revocation, audited as one made on its own
                await self._audit(
                    conn,
                    actor,
                    "admin_token.revoked",
                    now,
                    target=f"admin_token:{token.id}",
                    org_id=visible.org_id,
                    detail={"user": token.user, "prefix": token.prefix},
                )
            user = await users.by_name(conn, name)
        assert user is not None
        return user

    async def _home(self, conn: AsyncConnection, actor: Actor, org: str | None) -> int | None:
        """The new user's organisation: as named (within the actor's), or the actor's only one."""
        if org is None:
            if actor.root_admin:
                return None
            if len(actor.admin_orgs) == 1:
                return next(iter(actor.admin_orgs))
            raise BadRequest("name the user's organisation", code="org_required")
        found = await orgs.by_name(conn, org, self._scope(actor).orgs_read())
        if found is None:
            raise NotFound(f"no organisation {org!r}", code="org_not_found")
        if not actor.root_admin and found.id not in actor.admin_orgs:
            raise Forbidden(f"creating users in {org!r} needs org_admin on it", code="forbidden")
        return found.id
