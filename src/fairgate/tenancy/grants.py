"""Who may grant (and remove) which role where: nobody above their own scope or role.

    granted by     may grant
    proxy_admin    any role on its own kind of scope
    org_admin O    org_admin, viewer on O;  team_admin, member, viewer on a team of O
    team_admin T   member, viewer on T
    anyone else    nothing

A binding may be removed by whoever could grant it, so an org admin can remove
another org admin of the same organisation but never a proxy role. The same
rule is written twice on purpose: :func:`may_grant` decides a new binding in
Python, and ``Scope.bindings_write`` filters the DELETE in SQL with the same table.
"""

from __future__ import annotations

from fairgate.tenancy.actor import SCOPES, Actor, Role, ScopeKind

__all__ = ["BY_ORG_ADMIN", "BY_TEAM_ADMIN", "may_grant"]

BY_ORG_ADMIN: dict[ScopeKind, frozenset[Role]] = {
    "org": frozenset({Role.ORG_ADMIN, Role.VIEWER}),
    "team": frozenset({Role.TEAM_ADMIN, Role.MEMBER, Role.VIEWER}),
}
"""Roles an org admin grants on its organisation and on the organisation's teams."""

BY_TEAM_ADMIN: frozenset[Role] = frozenset({Role.MEMBER, Role.VIEWER})
"""Roles a team admin grants on its team."""


def may_grant(
    actor: Actor, role: Role, scope_kind: ScopeKind, scope_id: int, org_of_team: int | None
) -> bool:
    """Whether ``actor`` may bind ``role`` on the scope (``org_of_team``: a team scope's org).

    The scope kind must suit the role (a proxy role on the root, org_admin on an
    organisation, team_admin and member on a team, viewer on either): a
    mismatch is never granted, whoever asks.
    """
    if scope_kind not in SCOPES[role]:
        return False
    if actor.root_admin:
        return True
    if scope_kind == "org":
        return scope_id in actor.admin_orgs and role in BY_ORG_ADMIN["org"]
    if scope_kind == "team":
        if org_of_team in actor.admin_orgs and role in BY_ORG_ADMIN["team"]:
            return True
        return scope_id in actor.admin_teams and role in BY_TEAM_ADMIN
    return False
