"""IP allowlists: who may set and read the list of an organisation, a team or a key.

    list      organisation   its admins and viewers (and the proxy's)
              team, key      those who read the team whole: admins and viewers of it or
                             of its organisation (a member sees no list, not even its key's)
    set       organisation   its admins (org_admin), proxy_admin
              team, key      the team's admins: team_admin of it, org_admin of its
                             organisation, proxy_admin

A request must come from an address in every list that applies to its key
(its organisation's, its team's, its own), so a team admin can only narrow what
the organisation's list allows, never widen it. A scope the actor cannot see is
answered 404 (like one that does not exist); one it sees but may not set, 403.
Networks are checked and normalised by ``fairgate.core.address_lists.parse_cidrs``; an
empty list removes the list. Each change and its audit event
(``allowlist.set``, ``allowlist.cleared``) commit together, with the access
change every gateway reads within its poll interval.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import ColumnElement, false, or_, true
from sqlalchemy.ext.asyncio import AsyncConnection

from fairgate.core.address_lists import parse_cidrs
from fairgate.store import allowlists, keys, orgs, teams
from fairgate.store.allowlists import Allowlist, Kind, Subject
from fairgate.store.tables import orgs as orgs_table
from fairgate.store.tables import teams as teams_table
from fairgate.tenancy.actor import Actor
from fairgate.tenancy.base import Service
from fairgate.tenancy.errors import BadRequest, Forbidden, NotFound
from fairgate.tenancy.scope import Scope

__all__ = ["KINDS", "Allowlists"]

KINDS: tuple[Kind, ...] = ("org", "team", "key")


class Allowlists(Service):
    """List and set IP allowlists within the actor's scope (see the module docstring).

    Errors: BadRequest for an unknown kind or an entry that is not a network
    (the message names it), NotFound for a scope the actor cannot see,
    Forbidden for one it sees but may not set.
    """

    async def list(self, actor: Actor) -> Sequence[Allowlist]:
        async with self._store.read() as conn:
            return await allowlists.list_allowlists(
                conn,
                org_where=_orgs_read(actor),
                team_where=_teams_read(actor),
                key_where=_teams_read(actor),
            )

    async def set(
        self, actor: Actor, kind: str, name: str, cidrs: Sequence[str]
    ) -> tuple[str, ...]:
        """Replace the list of ``kind`` ``name`` with ``cidrs`` (empty: remove it); the
        networks as stored, in their normal form."""
        parsed_kind = _kind(kind)
        try:
            normal = parse_cidrs(cidrs)
        except ValueError as error:
            raise BadRequest(str(error), code="invalid_cidr") from None
        now = self._now()
        async with self._store.write() as conn:
            subject = await self._subject(conn, actor, parsed_kind, name)
            if not _may_set(actor, subject):
                raise Forbidden(_who_sets(subject), code="forbidden")
            changed = await allowlists.put(conn, subject, normal, actor.name, now)
            if changed:
                await self._audit(
                    conn,
                    actor,
                    "allowlist.set" if normal else "allowlist.cleared",
                    now,
                    target=f"{subject.kind}:{subject.name}",
                    org_id=subject.org_id,
                    team_id=subject.team_id,
                    detail={"cidrs": list(normal)},
                )
        return normal

    @staticmethod
    async def _subject(conn: AsyncConnection, actor: Actor, kind: Kind, name: str) -> Subject:
        """The scope named, if the actor may see it (the tree's usual read rules)."""
        scope = Scope(actor)
        if kind == "org":
            org = await orgs.by_name(conn, name, scope.orgs_read())
            if org is None:
                raise NotFound(f"no organisation {name[:128]!r}", code="org_not_found")
            return Subject("org", org.name, org.id, None)
        if kind == "team":
            team = await teams.by_name(conn, name, scope.teams_read())
            if team is None:
                raise NotFound(f"no team {name[:128]!r}", code="team_not_found")
            return Subject("team", team.name, team.org_id, team.id)
        key = await keys.get_key(conn, name, scope.keys_read())
        if key is None:
            raise NotFound(f"no key {name[:128]!r}", code="key_not_found")
        owner = await teams.by_id(conn, key.team_id)
        assert owner is not None
        return Subject("key", key.id, owner.org_id, owner.id)


def _kind(text: str) -> Kind:
    for kind in KINDS:
        if text == kind:
            return kind
    raise BadRequest(f"unknown kind {text[:32]!r}: one of org, team, key", code="invalid_kind")


def _may_set(actor: Actor, subject: Subject) -> bool:
    if actor.root_admin or subject.org_id in actor.admin_orgs:
        return True
    return subject.kind != "org" and subject.team_id in actor.admin_teams


def _who_sets(subject: Subject) -> str:
    if subject.kind == "org":
        return f"setting the IP allowlist of organisation {subject.name!r} needs org_admin on it"
    return f"setting the IP allowlist of {subject.kind} {subject.name!r} needs team_admin"


def _orgs_read(actor: Actor) -> ColumnElement[bool]:
    """Organisations whose list the actor reads: those it administers or views."""
    if actor.root_reader:
        return true()
    ids = sorted(actor.read_orgs)
    return orgs_table.c.id.in_(ids) if ids else false()


def _teams_read(actor: Actor) -> ColumnElement[bool]:
    """Teams whose lists (theirs and their keys') the actor reads: those it reads whole."""
    if actor.root_reader:
        return true()
    clauses = []
    if actor.read_orgs:
        clauses.append(teams_table.c.org_id.in_(sorted(actor.read_orgs)))
    if actor.read_teams:
        clauses.append(teams_table.c.id.in_(sorted(actor.read_teams)))
    return or_(*clauses) if clauses else false()
