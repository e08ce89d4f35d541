"""Who may grant which role where: nobody above their own scope or role (pure, no store)."""

from __future__ import annotations

import pytest

from fairgate.tenancy import Actor, Holding, Role
from fairgate.tenancy.grants import may_grant

ORG_A, ORG_B = 1, 2
TEAM_A1, TEAM_B1 = 11, 21  # a1 in A, b1 in B


def actor(role: Role, kind: str, scope_id: int = 0) -> Actor:
    return Actor(name="user:x", user_id=1, holds=(Holding(role, kind, scope_id),))  # type: ignore[arg-type]


ORG_ADMIN = actor(Role.ORG_ADMIN, "org", ORG_A)
TEAM_ADMIN = actor(Role.TEAM_ADMIN, "team", TEAM_A1)


@pytest.mark.parametrize(
    ("granter", "role", "kind", "scope_id", "org_of_team", "allowed"),
    [
        (ORG_ADMIN, Role.ORG_ADMIN, "org", ORG_A, None, True),
        (ORG_ADMIN, Role.VIEWER, "org", ORG_A, None, True),
        (ORG_ADMIN, Role.TEAM_ADMIN, "team", TEAM_A1, ORG_A, True),
        (ORG_ADMIN, Role.MEMBER, "team", TEAM_A1, ORG_A, True),
        (ORG_ADMIN, Role.ORG_ADMIN, "org", ORG_B, None, False),
        (ORG_ADMIN, Role.TEAM_ADMIN, "team", TEAM_B1, ORG_B, False),
        (ORG_ADMIN, Role.PROXY_ADMIN, "root", 0, None, False),
        (ORG_ADMIN, Role.PROXY_VIEWER, "root", 0, None, False),
        (TEAM_ADMIN, Role.MEMBER, "team", TEAM_A1, ORG_A, True),
        (TEAM_ADMIN, Role.VIEWER, "team", TEAM_A1, ORG_A, True),
        (TEAM_ADMIN, Role.TEAM_ADMIN, "team", TEAM_A1, ORG_A, False),
        (TEAM_ADMIN, Role.VIEWER, "org", ORG_A, None, False),
        (TEAM_ADMIN, Role.MEMBER, "team", TEAM_B1, ORG_B, False),
        (actor(Role.MEMBER, "team", TEAM_A1), Role.MEMBER, "team", TEAM_A1, ORG_A, False),
        (actor(Role.VIEWER, "org", ORG_A), Role.VIEWER, "org", ORG_A, None, False),
        (actor(Role.PROXY_VIEWER, "root"), Role.VIEWER, "org", ORG_A, None, False),
        (Actor.operator("op"), Role.PROXY_ADMIN, "root", 0, None, True),
        (Actor.operator("op"), Role.ORG_ADMIN, "team", TEAM_A1, ORG_A, False),  # wrong kind
        (Actor.operator("op"), Role.MEMBER, "org", ORG_A, None, False),  # wrong kind
    ],
)
def test_grant_rules(
    granter: Actor, role: Role, kind: str, scope_id: int, org_of_team: int | None, allowed: bool
) -> None:
    assert may_grant(granter, role, kind, scope_id, org_of_team) is allowed  # type: ignore[arg-type]
