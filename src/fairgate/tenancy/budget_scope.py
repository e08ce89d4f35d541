"""Who may read and set which budget, as SQL and in Python: the same table written twice.

    scope            set by (and increased, deleted by)          read by
    org:NAME         proxy_admin                                  readers of the organisation
    team:NAME        proxy_admin, org_admin of its organisation   readers of the team
    project:T/NAME   the above, team_admin of T                   readers of team T
    key:ID           the above, team_admin of the key's team      readers of the key
    tag:NAME         proxy_admin                                  proxy_admin, proxy_viewer

A budget is a cap set *on* a scope by the level above it, so nobody raises their
own ceiling: an org admin cannot change its organisation's budget, a team admin
cannot change its team's (it caps projects and keys inside the team instead).
Tags cross organisations, so only the proxy's own roles set or read theirs.
Each budget row carries the ``org_id`` and ``team_id`` of its scope, which the
clauses below test; a guessed budget id from another tenant matches no row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

from sqlalchemy import ColumnElement, and_, false, or_, select, true

from fairgate.limits.subject import ScopeKind
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

    ``name`` is an organisation or team name, ``TEAM/PROJECT``, a key id or a tag.
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
                "key:ID or tag:NAME",
                code="invalid_scope",
            )
        if kind == "project" and name.count("/") != 1:
            raise BadRequest(
                f"invalid scope {text[:300]!r}: use project:TEAM/NAME", code="invalid_scope"
            )
        return cls(kind, name)

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"


def may_set(actor: Actor, kind: str, org_id: int | None, team_id: int | None) -> bool:
    """Whether ``actor`` may set a budget of ``kind`` placed at (org_id, team_id)."""
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
    return or_(
        and_(b.scope_kind.in_(("team", *_INSIDE_TEAM)), _in(b.org_id, actor.admin_orgs)),
        and_(b.scope_kind.in_(_INSIDE_TEAM), _in(b.team_id, actor.admin_teams)),
    )


def budgets_read(actor: Actor) -> ColumnElement[bool]:
    """The budgets ``actor`` may see: those of every scope it reads (tags: proxy roles)."""
    if actor.root_reader:
        return true()
    b = budgets.c
    in_tree = b.scope_kind != "tag"
    seen_teams = actor.read_teams | actor.member_teams
    orgs_of_teams = select(teams.c.org_id).where(teams.c.id.in_(sorted(seen_teams)))
    clauses = [
        and_(in_tree, _in(b.org_id, actor.read_orgs)),
        and_(b.scope_kind == "org", b.org_id.in_(orgs_of_teams) if seen_teams else false()),
        and_(b.scope_kind.in_(("team", *_INSIDE_TEAM)), _in(b.team_id, actor.read_teams)),
        and_(b.scope_kind.in_(("team", "project")), _in(b.team_id, actor.member_teams)),
    ]
    if actor.user_id is not None:
        own = select(keys_table.c.id).where(keys_table.c.owner_id == actor.user_id)
        clauses.append(and_(b.scope_kind == "key", b.scope.in_(own)))
    return or_(*clauses)
