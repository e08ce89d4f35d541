"""Role bindings: grant and remove roles on the root, an organisation or a team.

Who may grant what is ``fairgate.tenancy.grants``; removing needs the same
right as granting, enforced in the DELETE's WHERE clause. Either needs a user
within ``Scope.users_act``: one the actor reaches and over every role of whom it
has authority; any other name is answered like one that does not exist. Bindings are read
from the store on every admin request, so a change applies at once.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncConnection

from fairgate.store import StoreConflict, orgs, role_bindings, teams, users
from fairgate.store.role_bindings import Binding
from fairgate.store.users import User
from fairgate.tenancy.actor import SCOPES, Actor, Role, ScopeKind
from fairgate.tenancy.base import Service
from fairgate.tenancy.errors import BadRequest, Conflict, Forbidden, NotFound, no_user
from fairgate.tenancy.grants import may_grant
from fairgate.tenancy.scope import Scope

__all__ = ["Roles"]


class Roles(Service):
    """List, grant and remove role bindings within the actor's scope.

    A binding names its scope by ``org`` or ``team`` (neither: the root).
    Errors: BadRequest for a role on the wrong kind of scope, NotFound for a
    user or scope the actor cannot see, Forbidden for a role it may not grant
    there, Conflict for a binding that exists.
    """

    async def list(self, actor: Actor, *, user: str | None = None) -> Sequence[Binding]:
        async with self._store.read() as conn:
            return await role_bindings.list_bindings(
                conn, self._scope(actor).bindings_read(), user=user
            )

    async def grant(
        self, actor: Actor, *, user: str, role: str, org: str | None = None, team: str | None = None
    ) -> Binding:
        parsed = _role(role)
        scope = self._scope(actor)
        now = self._now()
        try:
            async with self._store.write() as conn:
                kind, scope_id, org_id = await self._target(conn, scope, parsed, org, team)
                if not may_grant(actor, parsed, kind, scope_id, org_id):
                    raise Forbidden(
                        f"granting {parsed} there is above your own roles", code="forbidden"
                    )
                holder = await self._holder(conn, scope, user)
                if holder.disabled_at is not None:
                    raise no_user()
                binding = await role_bindings.insert_binding(
                    conn,
                    user_id=holder.id,
                    role=parsed.value,
                    scope_kind=kind,
                    scope_id=scope_id,
                    created_by=actor.name,
                    now=now,
                )
                await self._audit(
                    conn,
                    actor,
                    "role.granted",
                    now,
                    target=f"user:{user}",
                    org_id=org_id,
                    team_id=scope_id if kind == "team" else None,
                    detail={"role": parsed.value, "scope": _describe(kind, org, team)},
                )
        except StoreConflict:
            raise Conflict(
                f"{user!r} already holds {parsed} there", code="binding_exists"
            ) from None
        return binding

    async def revoke(
        self, actor: Actor, *, user: str, role: str, org: str | None = None, team: str | None = None
    ) -> None:
        parsed = _role(role)
        scope = self._scope(actor)
        now = self._now()
        async with self._store.write() as conn:
            kind, scope_id, org_id = await self._target(conn, scope, parsed, org, team)
            holder = await self._holder(conn, scope, user)
            removed = await role_bindings.delete_binding(
                conn,
                user_id=holder.id,
                role=parsed.value,
                scope_kind=kind,
                scope_id=scope_id,
                where=scope.bindings_write(),
            )
            if not removed:
                # Every binding of a holder passed _holder lies within bindings_write,
                # so nothing removed means no such binding.
                raise NotFound(f"{user!r} holds no {parsed} there", code="binding_not_found")
            await self._audit(
                conn,
                actor,
                "role.revoked",
                now,
                target=f"user:{user}",
                org_id=org_id,
                team_id=scope_id if kind == "team" else None,
                detail={"role": parsed.value, "scope": _describe(kind, org, team)},
            )

    @staticmethod
    async def _holder(conn: AsyncConnection, scope: Scope, name: str) -> User:
        """The user whose roles change, within ``Scope.users_act``.

        A user the actor reads but has no authority over is Forbidden; any other
        name, existing or not, gets the same :func:`no_user` answer.
        """
        holder = await users.by_name(conn, name, scope.users_act())
        if holder is not None:
            return holder
        if await users.by_name(conn, name, scope.users_read()) is not None:
            raise Forbidden(
                f"changing the roles of {name!r} needs the right to grant every role they hold",
                code="forbidden",
            )
        raise no_user()

    async def _target(
        self, conn: AsyncConnection, scope: Scope, role: Role, org: str | None, team: str | None
    ) -> tuple[ScopeKind, int, int | None]:
        """``(kind, id, org id)`` of the named scope, checked against the role's kinds."""
        if org is not None and team is not None:
            raise BadRequest("name an org or a team, not both", code="invalid_scope")
        kind: ScopeKind = "org" if org is not None else "team" if team is not None else "root"
        if kind not in SCOPES[role]:
            where = " or ".join(SCOPES[role])
            raise BadRequest(f"{role} is bound on {where}, not on {kind}", code="invalid_scope")
        if kind == "org":
            assert org is not None
            found = await orgs.by_name(conn, org, scope.orgs_read())
            if found is None:
                raise NotFound(f"no organisation {org!r}", code="org_not_found")
            return kind, found.id, found.id
        if kind == "team":
            assert team is not None
            found_team = await teams.by_name(conn, team, scope.teams_read())
            if found_team is None:
                raise NotFound(f"no team {team!r}", code="team_not_found")
            return kind, found_team.id, found_team.org_id
        return kind, 0, None


def _role(text: str) -> Role:
    try:
        return Role(text)
    except ValueError:
        names = ", ".join(r.value for r in Role)
        raise BadRequest(f"unknown role {text!r}: one of {names}", code="invalid_role") from None


def _describe(kind: ScopeKind, org: str | None, team: str | None) -> str:
    return f"org:{org}" if kind == "org" else f"team:{team}" if kind == "team" else "root"
