"""Who an SSO session acts as, rebuilt on every admin request.

    actor = await actors.actor("ada", session_roles, remote)    # None: nothing to act with

The roles are the bindings the person's claims gave at sign-in (kept in the
session, by scope name) plus the role bindings of the store user of the same
name, read now: a role revoked in the store, or that user disabled, applies on
the very next request (a disabled user opens nothing, whatever the claims
said). A disabled user whose name differs only in case disables the person too:
SCIM's ``userName`` is not case-exact (RFC 7643 §4.1.1), so a provider that
provisions "Ada" and signs in "ada" deactivates both at once; the store's roles
join only from the user of exactly that name. A claim binding on an organisation
or team that does not exist, or is disabled, gives nothing. With a store user the
actor is ``user:NAME`` (their user id set, as their admin tokens' actor is);
without one, ``sso:NAME``.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncConnection

from fairgate.accounts import SsoBinding
from fairgate.store import Store, orgs, role_bindings, teams, users
from fairgate.tenancy import Actor, Holding, Role

__all__ = ["SsoActors"]


class SsoActors:
    """Builds SSO actors from the store (one read transaction per request)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def actor(
        self, person: str, roles: Sequence[SsoBinding], remote: str | None = None
    ) -> Actor | None:
        """The actor of ``person``, or None when disabled or holding no role at all."""
        async with self._store.read() as conn:
            user = await users.by_name(conn, person)
            if user is not None and user.disabled_at is not None:
                return None
            if await users.disabled_namesake(conn, person):
                return None  # SCIM's userName is not case-exact: "Ada" disabled is "ada" too
            holds: list[Holding] = []
            if user is not None:
                for b in await role_bindings.bindings_of(conn, user.id):
                    holds.append(Holding(Role(b.role), b.scope_kind, b.scope_id))
            for binding in roles:
                held = await _holding(conn, binding)
                if held is not None and held not in holds:
                    holds.append(held)
        if not holds:
            return None
        if user is None:
            return Actor(name=f"sso:{person}", holds=tuple(holds), remote=remote)
        return Actor(name=f"user:{person}", user_id=user.id, holds=tuple(holds), remote=remote)


async def _holding(conn: AsyncConnection, binding: SsoBinding) -> Holding | None:
    role = Role(binding.role)
    if binding.org is not None:
        org = await orgs.by_name(conn, binding.org)
        return None if org is None or org.disabled_at is not None else Holding(role, "org", org.id)
    if binding.team is not None:
        team = await teams.by_name(conn, binding.team)
        if team is None or team.disabled_at is not None:
            return None
        return Holding(role, "team", team.id)
    return Holding(role, "root")
