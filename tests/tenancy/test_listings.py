"""Listings show each role what it may see and nothing else."""

from __future__ import annotations

import pytest

from fairgate.tenancy import Tenancy
from tenancy.world import build_world

VISIBLE_KEYS = {
    "alice": {"a1", "a2", "b1", "mia", "mo"},
    "pat": {"a1", "a2", "b1", "mia", "mo"},
    "olga": {"a1", "a2", "mia", "mo"},
    "bob": {"b1"},
    "tom": {"a1", "mia", "mo"},
    "mia": {"mia"},
    "vic": {"a1", "a2", "mia", "mo"},
    "val": {"a1", "mia", "mo"},
    "ua": set(),
}
VISIBLE_TEAMS = {
    "pat": {"a1", "a2", "xa", "b1", "xb"},
    "olga": {"a1", "a2", "xa"},
    "tom": {"a1"},
    "mia": {"a1"},
    "val": {"a1"},
    "ua": set(),
}


@pytest.mark.parametrize("user", sorted(VISIBLE_KEYS))
async def test_each_role_lists_the_keys_of_its_scope(tenancy: Tenancy, user: str) -> None:
    world = await build_world(tenancy)
    label = {key_id: label for label, key_id in world.keys.items()}
    listed = await tenancy.keys.list(await world.actor(user))
    assert {label[k.id] for k in listed} == VISIBLE_KEYS[user]


async def test_teams_orgs_users_and_audit_are_filtered_too(tenancy: Tenancy) -> None:
    world = await build_world(tenancy)
    for user, teams in VISIBLE_TEAMS.items():
        actor = await world.actor(user)
        assert {t.name for t in await tenancy.teams.list(actor)} == teams, user
    olga = await world.actor("olga")
    assert {o.name for o in await tenancy.orgs.list(olga)} == {"A"}
    assert "ub" not in {u.name for u in await tenancy.users.list(olga)}
    assert "bob" not in {b.user for b in await tenancy.roles.list(olga)}
    events = await tenancy.audit.list(olga)
    assert events and all(e.org_id is not None for e in events)
    bob = await world.actor("bob")
    assert not {e.target for e in await tenancy.audit.list(bob)} & {e.target for e in events}
    mia = await world.actor("mia")
    assert [t.user for t in await tenancy.admin_tokens.list(mia)] == ["mia"]
