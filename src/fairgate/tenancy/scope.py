"""The actor's scope as SQL: WHERE clauses that every listing and every write carries.

A write is ``UPDATE … WHERE id = :id AND <scope clause>``: a guessed id from
another tenant matches no row and changes nothing, whatever the code around it
does. Listings use the read clauses, so what a caller may not see never leaves
the database. Each clause is built from the actor's role sets
(:class:`fairgate.tenancy.actor.Actor`) and the tree's tables; an empty set
gives ``false``, never an empty ``IN ()``.

    read                                      write
    teams     root reader, org read, team     root admin, org admin (the team itself)
              read, member of it
    team admin (projects, keys of a team)     root admin, org admin, team admin
    keys      team read, own keys             team admin rights, member on own keys
    users     root reader, own org, bound     root admin; org admin of their org over
              in a readable scope, oneself    every role they hold (disable, enable);
                                              roles: a user within reach, over every
                                              role they hold (``users_act``)
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import ColumnElement, Select, and_, false, not_, or_, select, true

from fairgate.store.tables import admin_tokens as tokens_table
from fairgate.store.tables import audit_events, orgs, role_bindings, teams, users
from fairgate.store.tables import keys as keys_table
from fairgate.store.tables import projects as projects_table
from fairgate.tenancy.actor import Actor, Role
from fairgate.tenancy.grants import BY_ORG_ADMIN, BY_TEAM_ADMIN

__all__ = ["Scope"]


def _any(*clauses: ColumnElement[bool] | None) -> ColumnElement[bool]:
    present = [c for c in clauses if c is not None]
    return or_(*present) if present else false()


def _in(column: ColumnElement[int], ids: Iterable[int]) -> ColumnElement[bool] | None:
    values = sorted(set(ids))
    return column.in_(values) if values else None


class Scope:
    """Read and write clauses for one actor; each method returns a boolean SQL expression."""

    def __init__(self, actor: Actor) -> None:
        self.actor = actor

    # -- the tree -----------------------------------------------------------------

    def team_ids(self, clause: ColumnElement[bool]) -> Select[tuple[int]]:
        return select(teams.c.id).where(clause)

    def teams_read(self) -> ColumnElement[bool]:
        a = self.actor
        if a.root_reader:
            return true()
        return _any(
            _in(teams.c.org_id, a.read_orgs),
            _in(teams.c.id, a.read_teams | a.member_teams),
        )

    def teams_manage(self) -> ColumnElement[bool]:
        """Change the team itself: its models, default limits, disabling it."""
        a = self.actor
        if a.root_admin:
            return true()
        return _any(_in(teams.c.org_id, a.admin_orgs))

    def teams_admin(self) -> ColumnElement[bool]:
        """Administer what is inside a team: its projects and keys."""
        a = self.actor
        if a.root_admin:
            return true()
        return _any(_in(teams.c.org_id, a.admin_orgs), _in(teams.c.id, a.admin_teams))

    def orgs_read(self) -> ColumnElement[bool]:
        a = self.actor
        if a.root_reader:
            return true()
        team_ids = a.read_teams | a.member_teams
        in_teams = (
            orgs.c.id.in_(select(teams.c.org_id).where(teams.c.id.in_(sorted(team_ids))))
            if team_ids
            else None
        )
        return _any(_in(orgs.c.id, a.read_orgs), in_teams)

    def orgs_write(self) -> ColumnElement[bool]:
        return true() if self.actor.root_admin else false()

    def projects_read(self) -> ColumnElement[bool]:
        return projects_table.c.team_id.in_(self.team_ids(self.teams_read()))

    def projects_write(self) -> ColumnElement[bool]:
        return projects_table.c.team_id.in_(self.team_ids(self.teams_admin()))

    # -- keys ---------------------------------------------------------------------

    def _own_keys(self, team_ids: Iterable[int] | None) -> ColumnElement[bool] | None:
        user_id = self.actor.user_id
        if user_id is None:
            return None
        own = keys_table.c.owner_id == user_id
        if team_ids is None:
            return own
        in_teams = _in(keys_table.c.team_id, team_ids)
        return None if in_teams is None else and_(own, in_teams)

    def keys_read(self) -> ColumnElement[bool]:
        a = self.actor
        if a.root_reader:
            return true()
        whole = a.read_orgs or a.read_teams
        readable = (
            keys_table.c.team_id.in_(
                self.team_ids(_any(_in(teams.c.org_id, a.read_orgs), _in(teams.c.id, a.read_teams)))
            )
            if whole
            else None
        )
        return _any(readable, self._own_keys(None))

    def keys_owned(self) -> ColumnElement[bool]:
        """Keys the actor owns and may change: what a person acting on their own keys
        only (the web pages) may revoke, whatever else their roles would allow."""
        own = self._own_keys(None)
        return false() if own is None else and_(self.keys_write(), own)

    def keys_admin(self) -> ColumnElement[bool]:
        """Keys whose team the actor administers: what only a team admin (and above) may
        change on a key, its tags (which tag budgets bind it)."""
        a = self.actor
        if a.root_admin:
            return true()
        if not (a.admin_orgs or a.admin_teams):
            return false()
        return keys_table.c.team_id.in_(self.team_ids(self.teams_admin()))

    def keys_write(self) -> ColumnElement[bool]:
        a = self.actor
        if a.root_admin:
            return true()
        administered = (
            keys_table.c.team_id.in_(self.team_ids(self.teams_admin()))
            if a.admin_orgs or a.admin_teams
            else None
        )
        return _any(administered, self._own_keys(a.member_teams))

    # -- users, bindings, tokens, audit --------------------------------------------

    def bindings_read(self) -> ColumnElement[bool]:
        a = self.actor
        if a.root_reader:
            return true()
        rb = role_bindings.c
        team_ids = self.team_ids(self.teams_read())
        return _any(
            and_(rb.scope_kind == "org", _any(_in(rb.scope_id, a.read_orgs))),
            and_(rb.scope_kind == "team", rb.scope_id.in_(team_ids)),
            rb.user_id == a.user_id if a.user_id is not None else None,
        )

    def bindings_write(self) -> ColumnElement[bool]:
        """Bindings this actor could have granted, hence may remove (``grants`` table)."""
        a = self.actor
        if a.root_admin:
            return true()
        rb = role_bindings.c
        clauses: list[ColumnElement[bool] | None] = []
        if a.admin_orgs:
            org_teams = select(teams.c.id).where(teams.c.org_id.in_(sorted(a.admin_orgs)))
            clauses.append(
                and_(
                    rb.scope_kind == "org",
                    rb.scope_id.in_(sorted(a.admin_orgs)),
                    rb.role.in_(sorted(BY_ORG_ADMIN["org"])),
                )
            )
            clauses.append(
                and_(
                    rb.scope_kind == "team",
                    rb.scope_id.in_(org_teams),
                    rb.role.in_(sorted(BY_ORG_ADMIN["team"])),
                )
            )
        if a.admin_teams:
            clauses.append(
                and_(
                    rb.scope_kind == "team",
                    rb.scope_id.in_(sorted(a.admin_teams)),
                    rb.role.in_(sorted(BY_TEAM_ADMIN)),
                )
            )
        return _any(*clauses)

    def users_read(self) -> ColumnElement[bool]:
        a = self.actor
        if a.root_reader:
            return true()
        bound = select(role_bindings.c.user_id).where(self.bindings_read())
        return _any(
            _in(users.c.org_id, a.read_orgs),
            users.c.id.in_(bound),
            users.c.id == a.user_id if a.user_id is not None else None,
        )

    def users_write(self) -> ColumnElement[bool]:
        """Disable or enable a user: org admin of their organisation, over every role they hold."""
        a = self.actor
        if a.root_admin:
            return true()
        home = _in(users.c.org_id, a.admin_orgs)
        return false() if home is None else and_(home, self._over_every_role())

    def users_act(self) -> ColumnElement[bool]:
        """Grant or remove a user's roles: a user within reach, over every role they hold.

        Within reach: a user this actor reads, or one whose organisation holds a
        team it administers (a team admin adds members from its organisation).
        Anyone else is answered as a name that does not exist.
        """
        a = self.actor
        if a.root_admin:
            return true()
        team_orgs = (
            users.c.org_id.in_(select(teams.c.org_id).where(teams.c.id.in_(sorted(a.admin_teams))))
            if a.admin_teams
            else None
        )
        return and_(_any(self.users_read(), team_orgs), self._over_every_role())

    def _over_every_role(self) -> ColumnElement[bool]:
        """The user holds no binding this actor could not have granted (``bindings_write``)."""
        beyond = select(role_bindings.c.user_id).where(not_(self.bindings_write()))
        return users.c.id.not_in(beyond)

    def tokens_read(self) -> ColumnElement[bool]:
        a = self.actor
        if a.root_reader:
            return true()
        return tokens_table.c.user_id == a.user_id if a.user_id is not None else false()

    def tokens_write(self) -> ColumnElement[bool]:
        a = self.actor
        if a.root_admin:
            return true()
        return tokens_table.c.user_id == a.user_id if a.user_id is not None else false()

    def audit_read(self) -> ColumnElement[bool]:
        a = self.actor
        if a.root_reader:
            return true()
        return _any(
            _in(audit_events.c.org_id, a.read_orgs),
            _in(audit_events.c.team_id, a.read_teams),
        )

    def holds(self, role: Role) -> bool:
        return bool(self.actor.ids(role)) or self.actor.root_admin
