"""Admin tokens (``fga-…``): created for a user by that user or a proxy admin, shown once.

:meth:`AdminTokens.authenticate` turns a presented token into an :class:`Actor`
with the user's current role bindings, read from the store on every call: no
cache, so revoking a token, disabling the user or removing a binding applies to
the very next request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection

from fairgate.auth.secrets import new_admin_token
from fairgate.store import admin_tokens, from_unix, new_ulid, role_bindings, users
from fairgate.store.admin_tokens import AdminToken
from fairgate.store.users import User
from fairgate.tenancy.actor import Actor, Holding, Role
from fairgate.tenancy.base import Service
from fairgate.tenancy.errors import BadRequest, Forbidden, NotFound, no_user
from fairgate.tenancy.names import check_name

__all__ = ["AdminTokens", "NewAdminToken"]

MAX_LIFETIME = 366 * 86400.0


@dataclass(frozen=True, slots=True)
class NewAdminToken:
    """A token just created, with its secret: show it once, then forget it."""

    token: AdminToken
    secret: str


class AdminTokens(Service):
    """Create, list and revoke admin tokens; resolve a presented token to an actor.

    A user manages their own tokens; a proxy admin (the operator, the master
    key) manages everyone's. Errors: NotFound for a user or token the actor
    cannot see, Forbidden for someone else's token, BadRequest for a lifetime
    outside (0, 366 days].
    """

    async def list(self, actor: Actor, *, user: str | None = None) -> Sequence[AdminToken]:
        async with self._store.read() as conn:
            return await admin_tokens.list_tokens(conn, self._scope(actor).tokens_read(), user=user)

    async def create(
        self,
        actor: Actor,
        *,
        user: str | None = None,
        name: str | None = None,
        expires_in: float | None = None,
    ) -> NewAdminToken:
        if name is not None:
            check_name("token", name)
        if expires_in is not None and not 0 < expires_in <= MAX_LIFETIME:
            raise BadRequest("a token's lifetime is at most 366 days", code="invalid_expiry")
        now = self._now()
        expires_at = None if expires_in is None else from_unix(self._clock.wall() + expires_in)
        secret, _, prefix = new_admin_token()
        digest = self._hasher.digest(secret)
        async with self._store.write() as conn:
            holder = await self._holder(conn, actor, user)
            token = await admin_tokens.insert_token(
                conn,
                token_id=new_ulid(self._clock.wall()),
                user_id=holder.id,
                name=name,
                prefix=prefix,
                secret_sha256=digest,
                expires_at=expires_at,
                now=now,
            )
            await self._audit(
                conn,
                actor,
                "admin_token.created",
                now,
                target=f"admin_token:{token.id}",
                org_id=holder.org_id,
                detail={"user": holder.name, "prefix": prefix},
            )
        return NewAdminToken(token, secret)

    async def revoke(self, actor: Actor, token_id: str) -> None:
        scope = self._scope(actor)
        now = self._now()
        async with self._store.write() as conn:
            if not await admin_tokens.revoke_token(conn, token_id, now, scope.tokens_write()):
                visible = [
                    t
                    for t in await admin_tokens.list_tokens(conn, scope.tokens_read())
                    if t.id == token_id
                ]
                if not visible:
                    raise NotFound(f"no admin token {token_id!r}", code="token_not_found")
                if visible[0].revoked_at is not None:
                    return
                raise Forbidden("only its user or a proxy admin revokes a token", code="forbidden")
            # placed and described as its creation was: the holder's organisation reads both
            token = await admin_tokens.by_id(conn, token_id)
            assert token is not None
            holder = await users.by_id(conn, token.user_id)
            await self._audit(
                conn,
                actor,
                "admin_token.revoked",
                now,
                target=f"admin_token:{token_id}",
                org_id=None if holder is None else holder.org_id,
                detail={"user": token.user, "prefix": token.prefix},
            )

    async def authenticate(self, secret: str, *, remote: str | None = None) -> Actor | None:
        """The actor behind a presented ``fga-`` token, or None for any refused token.

        With a key pepper, a token stored before it is found by its plain SHA-256
        and re-hashed with the pepper in the same step (a race with another
        gateway re-hashing it too changes the row once).
        """
        now = self._now()
        stored, legacy = self._hasher.digest(secret), self._hasher.legacy(secret)
        digests = [stored] if legacy is None else [stored, legacy]
        async with self._store.read() as conn:
            found = await admin_tokens.resolve(conn, digests, now)
            if found is None:
                return None
            user_id, name, matched = found
            bound = await role_bindings.bindings_of(conn, user_id)
        if legacy is not None and matched == legacy:
            async with self._store.write() as conn:
                await admin_tokens.rehash_token(conn, legacy, stored)
        holds = tuple(Holding(Role(b.role), b.scope_kind, b.scope_id) for b in bound)
        return Actor(name=f"user:{name}", user_id=user_id, holds=holds, remote=remote)

    async def actor_of(self, user_id: int, *, remote: str | None = None) -> Actor | None:
        """The actor of user ``user_id`` with their current role bindings, read now (an
        admin web session re-reads them on every request); None for a missing or
        disabled user."""
        async with self._store.read() as conn:
            user = await users.by_id(conn, user_id)
            if user is None or user.disabled_at is not None:
                return None
            bound = await role_bindings.bindings_of(conn, user_id)
        holds = tuple(Holding(Role(b.role), b.scope_kind, b.scope_id) for b in bound)
        return Actor(name=f"user:{user.name}", user_id=user_id, holds=holds, remote=remote)

    async def _holder(self, conn: AsyncConnection, actor: Actor, user: str | None) -> User:
        if user is None:
            if actor.user_id is None:
                raise BadRequest("name the user the token is for", code="user_required")
            holder = await users.by_id(conn, actor.user_id)
        else:
            holder = await users.by_name(conn, user, self._scope(actor).users_read())
        if holder is None or holder.disabled_at is not None:
            raise no_user()
        if not actor.root_admin and holder.id != actor.user_id:
            raise Forbidden("a user creates their own tokens only", code="forbidden")
        return holder
