"""Who may read and set which budget, as SQL and in Python: the same table written twice.

    scope            set by (and increased, deleted by)          read by
    org:NAME         proxy_admin                                  readers of the organisation
    team:NAME        proxy_admin, org_admin of its organisation   readers of the team
    project:T/NAME   the above, team_admin of T                   readers of team T
    key:ID           the above, team_admin of the key's team      readers of the key
    tag:org:ORG/TAG  proxy_admin, org_admin of ORG                readers of the organisation
    tag:team:T/TAG   the above, team_admin of T                   readers of team T
    tag:TAG          proxy_admin                                  proxy_admin, proxy_viewer

A budget is a cap set *on* a scope by the level above it, so nobody raises their
own ceiling: an org admin cannot change its organisation's budget, a team admin
cannot change its team's (it caps projects and keys inside the team instead).
A tag budget belongs to an organisation or a team and binds only that tenant's
requests carrying the tag (a slice of its traffic, set like a team's or a
project's budget); the proxy-wide ``tag:TAG`` binds every request carrying the
tag, whoever sends it, so only the proxy's own roles set or read it.
Each budget row carries the ``org_id`` and ``team_id`` of its scope, which the
clauses below test; a guessed budget id from another tenant matches no row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

from sqlalchemy import ColumnElement, and_, false, or_, select, true

from fairgate.limits.subject import OWNED_TAG_PREFIXES, ScopeKind
from fairgate.store.tables import budgets, teams
from fairgate.store.tables import keys as keys_table
from fairgate.tenancy.actor import Actor
from fairgate.tenancy.errors import BadRequest

__all__ = ["BudgetScope", "budgets_read", "budgets_write", "may_set"]

_KINDS: tuple[ScopeKind, ...] = get_args(ScopeKind)
_INSIDE_TEAM = ("project", "key")


@dataclass(frozen=True, slots=True)
class BudgetScope:
    """A scope as written on the command line and in the API: ``team:lab-nlp``.

    ``name`` is an organisation or team name, ``TEAM/PROJECT``, a key id or a tag:
    ``org:ORG/TAG`` or ``team:TEAM/TAG`` for a tag owned by a tenant (``owner``),
    the bare tag for the proxy-wide one.
    """

    kind: ScopeKind
    name: str

    @classmethod
    def parse(cls, text: str) -> BudgetScope:
        """``kind:name``; BadRequest (code ``invalid_scope``) for anything else."""
        kind, sep, name = text.partition(":")
        if not sep or kind not in _KINDS or not name.strip() or name != name.strip():
            raise BadRequest(
                f"invalid scope {text[:300]!r}: use org:NAME, team:NAME, project:TEAM/NAME, "
                "key:ID, tag:org:ORG/TAG, tag:team:TEAM/TAG or tag:TAG",
                code="invalid_scope",
            )
        if kind == "project" and name.count("/") != 1:
            raise BadRequest(
                f"invalid scope {text[:300]!r}: use project:TEAM/NAME", code="invalid_scope"
            )
        scope = cls(kind, name)
        if kind == "tag" and name.startswith(OWNED_TAG_PREFIXES):
            owner, _, tag = name.partition("/")
            if not tag or not owner.partition(":")[2]:
                raise BadRequest(
                    f"invalid scope {text[:300]!r}: use tag:org:ORG/TAG or tag:team:TEAM/TAG",
                    code="invalid_scope",
                )
        return scope

    @property
    def owner(self) -> tuple[str, str] | None:
        """(``org`` or ``team``, its name) of an owned tag; None for any other scope."""
        if self.kind != "tag" or not self.name.startswith(OWNED_TAG_PREFIXES):
            return None
        owner = self.name.partition("/")[0]
        level, _, name = owner.partition(":")
        return level, name

    @property
    def tag(self) -> str | None:
        """The tag of a tag scope (owned or not); None for any other scope."""
        if self.kind != "tag":
            return None
        return self.name.partition("/")[2] if self.owner is not None else self.name

    @property
    def level(self) -> str:
        """Whose budget it is for the rules above: an organisation's tag is set like a
        team's budget (``team``), a team's tag like a project's (``project``)."""
        owner = self.owner
        if owner is None:
            return self.kind
        return "team" if owner[0] == "org" else "project"

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"


def may_set(actor: Actor, kind: str, org_id: int | None, team_id: int | None) -> bool:
    """Whether ``actor`` may set a budget of ``kind`` (``BudgetScope.level``) placed at
    (org_id, team_id)."""
    if actor.root_admin:
        return True
    if kind in ("team", *_INSIDE_TEAM) and org_id in actor.admin_orgs:
        return True
    return kind in _INSIDE_TEAM and team_id in actor.admin_teams


def _in(column: ColumnElement[int | None], ids: frozenset[int]) -> ColumnElement[bool]:
    return column.in_(sorted(ids)) if ids else false()


def budgets_write(actor: Actor) -> ColumnElement[bool]:
    """The budgets ``actor`` may set, increase or delete (``may_set`` in SQL)."""
    if actor.root_admin:
        return true()
    b = budgets.c
    # an owned tag carries its owner's ids (org only, or org and team); a proxy-wide
    # tag carries none and matches neither clause
    return or_(
        and_(b.scope_kind.in_(("team", "tag", *_INSIDE_TEAM)), _in(b.org_id, actor.admin_orgs)),
        and_(b.scope_kind.in_(("tag", *_INSIDE_TEAM)), _in(b.team_id, actor.admin_teams)),
    )


def budgets_read(actor: Actor) -> ColumnElement[bool]:
    """The budgets ``actor`` may see: those of every scope it reads (tags: proxy roles)."""
    if actor.root_reader:
        return true()
    b = budgets.c
    # a proxy-wide tag has no org_id (NULL matches no IN list): read by proxy roles only
    seen_teams = actor.read_teams | actor.member_teams
    orgs_of_teams = select(teams.c.org_id).where(teams.c.id.in_(sorted(seen_teams)))
    kinds_in_team = ("team", "tag", *_INSIDE_TEAM)
    clauses = [
        _in(b.org_id, actor.read_orgs),
        and_(b.scope_kind == "org", b.org_id.in_(orgs_of_teams) if seen_teams else false()),
        and_(b.scope_kind.in_(kinds_in_team), _in(b.team_id, actor.read_teams)),
        and_(b.scope_kind.in_(("team", "project", "tag")), _in(b.team_id, actor.member_teams)),
    ]
    if actor.user_id is not None:
        own = select(keys_table.c.id).where(keys_table.c.owner_id == actor.user_id)
        clauses.append(and_(b.scope_kind == "key", b.scope.in_(own)))
    return or_(*clauses)
