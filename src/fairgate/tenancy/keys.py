"""Virtual keys: create (the secret shown once), list without secrets, revoke, rotate, change.

    new = await tenancy.keys.create(actor, team="lab-nlp", limits=Limits(rpm=60))
    new.secret                 # fg-…, returned here and never again
    await tenancy.keys.rotate(actor, new.key.id, grace=86400)   # old secret valid one more day

Who may: a team's admins (team_admin, its org's org_admin, proxy_admin) on every
key of the team; a member on the keys they own in their team (a key a member
creates is theirs, so a member with no store user, signed in by single sign-on
claims alone, creates none: Forbidden). The scope is in the UPDATE's WHERE clause: a key id from
another tenant changes nothing and answers NotFound; a key the actor can see
but not change answers Forbidden. Revoking a revoked key is a no-op.

Limits: only a team's admins set a key's limits (a member creates keys with
the team's, and changes none: Forbidden), and never above the team's per-key
limits (BadRequest ``limit_above_team``, naming the field and the team's value).
A user owns at most the team's ``max_keys_per_member`` live keys in it (Conflict
``too_many_keys``); the count and the insert share one transaction that holds
the team's row, so concurrent creations cannot pass the bound together. Keys
created by the operator or the master key have no owner and no such bound.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from fairgate.auth.secrets import new_key
from fairgate.store import from_unix, keys, new_ulid, projects, teams
from fairgate.store.keys import Key, NewKeyRow
from fairgate.store.teams import Team
from fairgate.tenancy.actor import Actor
from fairgate.tenancy.base import Service
from fairgate.tenancy.errors import BadRequest, Conflict, Forbidden, NotFound
from fairgate.tenancy.limits import Limits
from fairgate.tenancy.names import check_labels, check_name
from fairgate.tenancy.scope import Scope
from fairgate.tenancy.teams import UNSET

__all__ = ["MAX_GRACE", "PAGE", "Keys", "NewKey"]

MAX_GRACE = 30 * 86400.0
"""Longest rotation grace period (seconds): 30 days."""

PAGE = 1000
"""Most keys one listing answers; the next page starts after the last id of this one."""

PERSON_KEY_PREFIX = "jwt-"
"""The ids of people's synthetic keys (``fairgate.auth.jwt.person_key_id``); no ULID has it."""


@dataclass(frozen=True, slots=True)
class NewKey:
    """A key just created or rotated, with its secret: show it once, then forget it."""

    key: Key
    secret: str


class Keys(Service):
    """Keys of the teams in the actor's scope (see the module docstring for who may what).

    Durations and moments are seconds (``expires_in`` from now, ``grace``);
    errors are NotFound, Forbidden and BadRequest from ``fairgate.tenancy.errors``.
    """

    async def list(
        self,
        actor: Actor,
        *,
        team: str | None = None,
        include_revoked: bool = True,
        after: str | None = None,
        limit: int | None = PAGE,
    ) -> Sequence[Key]:
        """The keys ``actor`` reads, in id order: a page of ``limit`` (None: all of them)
        after the key id ``after``."""
        async with self._store.read() as conn:
            return await keys.list_keys(
                conn,
                self._scope(actor).keys_read(),
                team=team,
                include_revoked=include_revoked,
                after=after,
                limit=limit,
            )

    async def get(self, actor: Actor, key_id: str) -> Key:
        async with self._store.read() as conn:
            key = await keys.get_key(conn, key_id, self._scope(actor).keys_read())
        if key is None:
            raise NotFound(f"no key {key_id!r}", code="key_not_found")
        return key

    async def may_create(self, actor: Actor, team: str) -> bool:
        """Whether ``actor`` may create a key of its own in ``team`` (no tags, the team's
        limits), by the rule :meth:`create` applies: a page offers only what it allows.
        The per-member key count is not part of it (it frees up as keys are revoked)."""
        async with self._store.read() as conn:
            try:
                await self._creatable_team(conn, actor, self._scope(actor), team, (), Limits())
            except (NotFound, Forbidden, BadRequest):
                return False
        return True

    async def create(
        self,
        actor: Actor,
        *,
        team: str,
        project: str | None = None,
        name: str | None = None,
        models: Collection[str] | None = None,
        tags: Collection[str] = (),
        limits: Limits | None = None,
        expires_in: float | None = None,
    ) -> NewKey:
        async with self._store.write() as conn:
            return await self.create_in(
                conn,
                actor,
                team=team,
                project=project,
                name=name,
                models=models,
                tags=tags,
                limits=limits,
                expires_in=expires_in,
            )

    async def create_in(
        self,
        conn: AsyncConnection,
        actor: Actor,
        *,
        team: str,
        project: str | None = None,
        name: str | None = None,
        models: Collection[str] | None = None,
        tags: Collection[str] = (),
        limits: Limits | None = None,
        expires_in: float | None = None,
    ) -> NewKey:
        """:meth:`create` inside the caller's write transaction ``conn`` (a claim link is
        stored with its key in one transaction: both or neither)."""
        if name is not None:
            check_name("key", name)
        model_list = self._check_models(models)
        tag_list = check_labels("tag", tags, most=8)
        expires_at = self._expiry(expires_in)
        limits = limits or Limits()
        scope = self._scope(actor)
        now = self._now()
        secret, _, prefix = new_key()
        digest = self._hasher.digest(secret)
        owner_team = await self._creatable_team(conn, actor, scope, team, tag_list, limits)
        await self._check_key_count(conn, actor, owner_team, now)
        project_id = await self._project_id(conn, owner_team.name, project)
        row = NewKeyRow(
            id=new_ulid(self._clock.wall()),
            team_id=owner_team.id,
            project_id=project_id,
            owner_id=actor.user_id,
            name=name,
            prefix=prefix,
            secret_sha256=digest,
            models=model_list,
            tags=tag_list,
            limits=limits.columns(),
            created_by=actor.name,
            expires_at=expires_at,
        )
        key = await keys.insert_key(conn, row, now)
        await self._audit(
            conn,
            actor,
            "key.created",
            now,
            target=f"key:{key.id}",
            org_id=owner_team.org_id,
            team_id=owner_team.id,
            detail={"prefix": prefix, "project": project, "models": _list(model_list)},
        )
        return NewKey(key, secret)

    async def _creatable_team(
        self,
        conn: AsyncConnection,
        actor: Actor,
        scope: Scope,
        team: str,
        tags: tuple[str, ...],
        limits: Limits,
    ) -> Team:
        """The team ``actor`` may create this key in: NotFound for a team it cannot see,
        Forbidden below member (or, for tags and limits, below team admin), BadRequest for
        a disabled team or limits above the team's."""
        owner_team = await teams.by_name(conn, team, scope.teams_read())
        if owner_team is None:
            raise NotFound(f"no team {team!r}", code="team_not_found")
        administers = await teams.by_name(conn, team, scope.teams_admin()) is not None
        if not administers and owner_team.id not in actor.member_teams:
            raise Forbidden(f"creating keys in {team!r} needs member or above", code="forbidden")
        if not administers and actor.user_id is None:
            # a member with no store user (single sign-on by claims alone) would own
            # nothing: the key would escape the per-member bound and the member's sight
            raise Forbidden(
                f"creating keys in {team!r} as a member needs a user of your name",
                code="forbidden",
            )
        if tags and not administers:
            raise Forbidden(_TAGS_FORBIDDEN, code="forbidden")
        if owner_team.disabled_at is not None:
            raise BadRequest(f"team {team!r} is disabled", code="team_disabled")
        if limits != Limits():
            _check_limits(owner_team, limits, administers)
        return owner_team

    async def revoke(self, actor: Actor, key_id: str, *, own_only: bool = False) -> Key:
        """Revoke a key in the actor's scope. ``own_only``: only a key the actor owns (the
        web pages, where a team admin's account revokes its own keys, not its teammates');
        any other id answers NotFound and changes nothing."""
        scope = self._scope(actor)
        where = scope.keys_owned() if own_only else scope.keys_write()
        now = self._now()
        async with self._store.write() as conn:
            if not await keys.revoke(conn, key_id, now, where):
                if own_only and await keys.get_key(conn, key_id, where) is None:
                    raise NotFound(f"no key {key_id!r} of yours", code="key_not_found")
                return await self._unchanged(conn, scope, key_id, "revoking")
            key = await self._audited(conn, actor, key_id, "key.revoked", now)
        return key

    async def rotate(self, actor: Actor, key_id: str, *, grace: float = 0.0) -> NewKey:
        """A new secret for the same key id; the old one stays valid ``grace`` seconds.

        A person's key (``jwt-…``, an access token's caller) has no secret to rotate: its
        secrets come from ``/v1/auth/exchange`` only (BadRequest ``person_key``)."""
        if key_id.startswith(PERSON_KEY_PREFIX):
            raise BadRequest(
                "a person's key is used with their access token and has no secret to rotate",
                code="person_key",
            )
        if not 0.0 <= grace <= MAX_GRACE:
            raise BadRequest("grace must be between 0s and 720h", code="invalid_grace")
        scope = self._scope(actor)
        now = self._now()
        secret, _, prefix = new_key()
        digest = self._hasher.digest(secret)
        until = from_unix(self._clock.wall() + grace) if grace > 0 else None
        async with self._store.write() as conn:
            rotated = await keys.rotate(
                conn,
                key_id,
                secret_sha256=digest,
                prefix=prefix,
                previous_until=until,
                now=now,
                where=scope.keys_write(),
            )
            if not rotated:
                await self._unchanged(conn, scope, key_id, "rotating", idempotent=False)
            key = await self._audited(
                conn, actor, key_id, "key.rotated", now, {"prefix": prefix, "grace_seconds": grace}
            )
        return NewKey(key, secret)

    async def update(
        self,
        actor: Actor,
        key_id: str,
        *,
        models: Collection[str] | None = UNSET,
        tags: Collection[str] = UNSET,
        limits: Limits | None = UNSET,
        expires_in: float | None = UNSET,
    ) -> Key:
        """Change a live key's allowlist, tags, limits or expiry (UNSET leaves one as it is).
        Limits (setting or clearing them) need an admin of the key's team."""
        values: dict[str, Any] = {}
        if models is not UNSET:
            values["models"] = self._check_models(models)
        if tags is not UNSET:
            values["tags"] = check_labels("tag", tags, most=8)
        if limits is not UNSET:
            values.update((limits or Limits()).columns())
        if expires_in is not UNSET:
            values["expires_at"] = self._expiry(expires_in)
        if not values:
            return await self.get(actor, key_id)
        scope = self._scope(actor)
        now = self._now()
        async with self._store.write() as conn:
            if "tags" in values and await keys.get_key(conn, key_id, scope.keys_admin()) is None:
                if await keys.get_key(conn, key_id, scope.keys_read()) is None:
                    raise NotFound(f"no key {key_id!r}", code="key_not_found")
                raise Forbidden(_TAGS_FORBIDDEN, code="forbidden")
            if limits is not UNSET:
                await self._check_key_limits(conn, scope, key_id, limits or Limits())
            if "expires_at" in values:
                await self._check_revival(conn, scope, key_id, now)
            if not await keys.update_key(conn, key_id, values, now, scope.keys_write()):
                await self._unchanged(conn, scope, key_id, "changing", idempotent=False)
            detail = {k: _list(v) if isinstance(v, tuple) else v for k, v in values.items()}
            detail.pop("expires_at", None)
            return await self._audited(conn, actor, key_id, "key.updated", now, detail)

    async def _check_key_limits(
        self, conn: AsyncConnection, scope: Scope, key_id: str, limits: Limits
    ) -> None:
        """NotFound for a key the actor cannot see, else ``_check_limits`` on its team."""
        visible = await keys.get_key(conn, key_id, scope.keys_read())
        if visible is None:
            raise NotFound(f"no key {key_id!r}", code="key_not_found")
        team = await teams.by_name(conn, visible.team)
        assert team is not None
        administers = await teams.by_name(conn, team.name, scope.teams_admin()) is not None
        _check_limits(team, limits, administers)

    async def _check_key_count(
        self, conn: AsyncConnection, actor: Actor, team: Team, now: Any
    ) -> None:
        """Conflict when the actor already owns the team's ``max_keys_per_member`` live keys."""
        if actor.user_id is None:
            return  # the operator and the master key own no keys
        await self._check_owned(conn, actor.user_id, team, now, "you own")

    async def _check_revival(
        self, conn: AsyncConnection, scope: Scope, key_id: str, now: Any
    ) -> None:
        """A new expiry on an expired key brings it back among its owner's live keys: the
        same bound as creating one (else a member could revive expired keys without end)."""
        owner = await keys.expired_owner(conn, key_id, now)
        visible = await keys.get_key(conn, key_id, scope.keys_write())
        if owner is None or visible is None:
            return  # live, revoked, ownerless or not the actor's to change: nothing to count
        team = await teams.by_id(conn, visible.team_id)
        assert team is not None
        await self._check_owned(conn, owner, team, now, "its owner has")

    async def _check_owned(
        self, conn: AsyncConnection, owner: int, team: Team, now: Any, who: str
    ) -> None:
        await teams.lock(conn, team.id)
        owned = await keys.live_keys_owned(conn, team.id, owner, now)
        if owned >= team.max_keys_per_member:
            raise Conflict(
                f"{who} {owned} live keys in team {team.name!r}, its limit per member: "
                "revoke one first",
                code="too_many_keys",
            )

    async def _audited(
        self,
        conn: AsyncConnection,
        actor: Actor,
        key_id: str,
        action: str,
        now: Any,
        detail: dict[str, Any] | None = None,
    ) -> Key:
        key = await keys.get_key(conn, key_id)
        assert key is not None
        team = await teams.by_id(conn, key.team_id)
        await self._audit(
            conn,
            actor,
            action,
            now,
            target=f"key:{key_id}",
            org_id=team.org_id if team else None,
            team_id=key.team_id,
            detail=detail,
        )
        return key

    async def _unchanged(
        self,
        conn: AsyncConnection,
        scope: Scope,
        key_id: str,
        doing: str,
        *,
        idempotent: bool = True,
    ) -> Key:
        """Why a scoped UPDATE matched nothing: NotFound, Forbidden, or an already revoked key."""
        visible = await keys.get_key(conn, key_id, scope.keys_read())
        if visible is None:
            raise NotFound(f"no key {key_id!r}", code="key_not_found")
        writable = await keys.get_key(conn, key_id, scope.keys_write()) is not None
        if not writable:
            raise Forbidden(f"{doing} key {key_id!r} is not within your roles", code="forbidden")
        if idempotent and visible.revoked_at is not None:
            return visible
        raise BadRequest(f"key {key_id!r} is revoked", code="key_revoked")

    async def _project_id(
        self, conn: AsyncConnection, team: str, project: str | None
    ) -> int | None:
        if project is None:
            return None
        found = await projects.by_name(conn, team, project)
        if found is None:
            raise NotFound(f"no project {team}/{project}", code="project_not_found")
        if found.disabled_at is not None:
            raise BadRequest(f"project {team}/{project} is disabled", code="project_disabled")
        return found.id

    def _expiry(self, expires_in: float | None) -> Any:
        if expires_in is None:
            return None
        if not 0 < expires_in <= 10 * 366 * 86400:
            raise BadRequest("expiry must be in the future, within 10 years", code="invalid_expiry")
        return from_unix(self._clock.wall() + expires_in)


_TAGS_FORBIDDEN = (
    "a key's tags decide which tag budgets bind it: they are set by team admins and above"
)


def _check_limits(team: Team, limits: Limits, administers: bool) -> None:
    """Forbidden unless the actor administers ``team``; BadRequest when a limit is
    above the team's per-key limit."""
    if not administers:
        raise Forbidden(
            f"setting a key's limits in {team.name!r} needs team_admin or above",
            code="forbidden",
        )
    ceiling = Limits(team.rpm, team.tpm, team.rpd, team.max_in_flight)
    above = limits.above(ceiling)
    if above is not None:
        name, bound = above
        raise BadRequest(
            f"{name} {getattr(limits, name)} is above team {team.name!r}'s limit of {bound} "
            "per key",
            code="limit_above_team",
        )


def _list(models: tuple[str, ...] | None) -> list[str] | None:
    return None if models is None else list(models)
