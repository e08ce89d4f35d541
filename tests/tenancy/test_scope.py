"""Every write outside a role's scope is refused and changes nothing (read back from the store).

The cells are the writes of docs/tenancy.md's matrix that a role may NOT make.
Expected answer: NotFound where the target is invisible to the role (a guessed
name or id from another tenant confirms nothing), Forbidden where the role can
see it but not change it. After each attempt every table is read back and
compared with the snapshot taken before, audit trail included.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from sqlalchemy import select

from fairgate.core.errors import Forbidden, NotFound
from fairgate.store import Store
from fairgate.store.tables import metadata
from fairgate.tenancy import Actor, Limits, Tenancy
from tenancy.world import World, build_world

Op = Callable[[Tenancy, Actor, World], Awaitable[Any]]

OPS: dict[str, Callable[..., Op]] = {
    "org.create": lambda: lambda t, a, w: t.orgs.create(a, "neworg"),
    "org.disable": lambda org: lambda t, a, w: t.orgs.disable(a, org),
    "team.create": lambda org: lambda t, a, w: t.teams.create(a, org=org, name="newteam"),
    "team.update": lambda team: lambda t, a, w: t.teams.update(a, team, models=["llama-8b"]),
    "team.limits": lambda team: lambda t, a, w: t.teams.update(a, team, limits=Limits(rpm=1)),
    "team.disable": lambda team: lambda t, a, w: t.teams.disable(a, team),
    "project.create": lambda team: lambda t, a, w: t.projects.create(a, team=team, name="q"),
    "project.disable": lambda team: lambda t, a, w: t.projects.disable(a, team=team, name="p"),
    "key.create": lambda team: lambda t, a, w: t.keys.create(a, team=team),
    "key.revoke": lambda key: lambda t, a, w: t.keys.revoke(a, w.keys[key]),
    "key.rotate": lambda key: lambda t, a, w: t.keys.rotate(a, w.keys[key], grace=60),
    "key.update": lambda key: lambda t, a, w: t.keys.update(a, w.keys[key], models=["llama-8b"]),
    "user.create": lambda org: lambda t, a, w: t.users.create(a, "newuser", org=org),
    "user.disable": lambda user: lambda t, a, w: t.users.disable(a, user),
    "role.grant": lambda user, role, org=None, team=None: (
        lambda t, a, w: t.roles.grant(a, user=user, role=role, org=org, team=team)
    ),
    "role.revoke": lambda user, role, org=None, team=None: (
        lambda t, a, w: t.roles.revoke(a, user=user, role=role, org=org, team=team)
    ),
    "token.create": lambda user: lambda t, a, w: t.admin_tokens.create(a, user=user),
    "token.revoke": lambda user: lambda t, a, w: t.admin_tokens.revoke(a, w.token_ids[user]),
}

F, N = Forbidden, NotFound

# (operation, its arguments, expected refusal), per acting user; see world.py for who is who.
CELLS: dict[str, list[tuple[str, tuple[Any, ...], type[Exception]]]] = {
    "pat": [  # proxy_viewer: reads everything, writes nothing
        ("org.create", (), F),
        ("org.disable", ("C",), F),
        ("team.create", ("A",), F),
        ("team.update", ("b1",), F),
        ("team.disable", ("xa",), F),
        ("project.create", ("a1",), F),
        ("project.disable", ("b1",), F),
        ("key.create", ("a1",), F),
        ("key.revoke", ("b1",), F),
        ("key.rotate", ("mia",), F),
        ("key.update", ("a2",), F),
        ("user.create", ("A",), F),
        ("user.disable", ("ua",), F),
        ("role.grant", ("ua", "viewer", "A"), F),
        ("role.grant", ("pat", "proxy_admin"), F),
        ("role.revoke", ("tom", "team_admin", None, "a1"), F),
        ("token.create", ("ua",), F),
        ("token.revoke", ("ub",), F),
    ],
    "olga": [  # org_admin on A: nothing in B or C, nothing at the root
        ("org.create", (), F),
        ("org.disable", ("C",), N),
        ("org.disable", ("B",), N),
        ("team.create", ("B",), N),
        ("team.update", ("b1",), N),
        ("team.limits", ("xb",), N),
        ("team.disable", ("xb",), N),
        ("project.create", ("b1",), N),
        ("project.disable", ("b1",), N),
        ("key.create", ("b1",), N),
        ("key.revoke", ("b1",), N),
        ("key.rotate", ("b1",), N),
        ("key.update", ("b1",), N),
        ("user.create", ("B",), N),
        ("user.disable", ("ub",), N),
        ("user.disable", ("bob",), N),
        ("role.grant", ("ua", "team_admin", None, "b1"), N),
        ("role.grant", ("ua", "org_admin", "B"), N),
        ("role.grant", ("ua", "proxy_admin"), F),
        ("role.grant", ("ua", "proxy_viewer"), F),
        ("role.revoke", ("bob", "org_admin", "B"), N),
        ("role.revoke", ("alice", "proxy_admin"), N),
        ("token.create", ("ua",), F),
        ("token.revoke", ("ub",), N),
        ("token.revoke", ("tom",), N),
    ],
    "tom": [  # team_admin on a1: its projects, keys and members only
        ("org.create", (), F),
        ("team.create", ("A",), F),
        ("team.update", ("a1",), F),
        ("team.limits", ("a1",), F),
        ("team.update", ("a2",), N),
        ("team.disable", ("xa",), N),
        ("project.create", ("a2",), N),
        ("project.disable", ("a2",), N),
        ("project.create", ("b1",), N),
        ("key.create", ("a2",), N),
        ("key.revoke", ("a2",), N),
        ("key.rotate", ("b1",), N),
        ("key.update", ("a2",), N),
        ("user.create", ("A",), F),
        ("user.disable", ("mia",), F),
        ("user.disable", ("ua",), N),
        ("role.grant", ("ua", "team_admin", None, "a1"), F),
        ("role.grant", ("ua", "org_admin", "A"), F),
        ("role.grant", ("ua", "member", None, "a2"), N),
        ("role.revoke", ("olga", "org_admin", "A"), N),
        ("role.revoke", ("val", "viewer", None, "a2"), N),
        ("token.create", ("mia",), F),
        ("token.revoke", ("mia",), N),
    ],
    "mia": [  # member of a1: its own keys only
        ("team.create", ("A",), F),
        ("team.update", ("a1",), F),
        ("project.create", ("a1",), F),
        ("project.disable", ("a1",), F),
        ("key.create", ("a2",), N),
        ("key.revoke", ("mo",), N),
        ("key.rotate", ("a1",), N),
        ("key.update", ("mo",), N),
        ("key.revoke", ("b1",), N),
        ("user.create", ("A",), F),
        ("user.disable", ("mo",), F),
        ("role.grant", ("ua", "member", None, "a1"), F),
        ("role.revoke", ("mo", "member", None, "a1"), F),
        ("token.create", ("mo",), F),
        ("token.revoke", ("mo",), N),
    ],
    "vic": [  # viewer on A: reads A, writes nothing
        ("team.create", ("A",), F),
        ("team.update", ("a1",), F),
        ("team.disable", ("xa",), F),
        ("project.create", ("a1",), F),
        ("project.disable", ("a2",), F),
        ("key.create", ("a1",), F),
        ("key.revoke", ("a1",), F),
        ("key.rotate", ("mia",), F),
        ("key.update", ("a2",), F),
        ("key.revoke", ("b1",), N),
        ("user.create", ("A",), F),
        ("user.disable", ("ua",), F),
        ("role.grant", ("ua", "viewer", "A"), F),
        ("role.revoke", ("tom", "team_admin", None, "a1"), F),
        ("token.create", ("ua",), F),
    ],
    "val": [  # viewer on a1: reads a1, writes nothing
        ("team.update", ("a1",), F),
        ("project.create", ("a1",), F),
        ("key.create", ("a1",), F),
        ("key.revoke", ("a1",), F),
        ("key.rotate", ("mo",), F),
        ("key.revoke", ("a2",), N),
        ("role.grant", ("ua", "member", None, "a1"), F),
        ("role.revoke", ("mia", "member", None, "a1"), F),
    ],
}


async def snapshot(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, in a stable order."""
    async with store.read() as conn:
        return {
            table.name: sorted((tuple(row) for row in await conn.execute(select(table))), key=repr)
            for table in metadata.sorted_tables
        }


@pytest.mark.parametrize("user", sorted(CELLS))
async def test_every_write_outside_the_role_is_refused_and_changes_nothing(
    tenancy: Tenancy, store: Store, user: str
) -> None:
    world = await build_world(tenancy)
    actor = await world.actor(user)
    before = await snapshot(store)
    wrong: list[str] = []
    for name, args, expected in CELLS[user]:
        cell = f"{user} {name}{args}"
        try:
            await OPS[name](*args)(tenancy, actor, world)
        except (Forbidden, NotFound) as refused:
            if type(refused) is not expected:
                wrong.append(f"{cell}: {type(refused).__name__}, expected {expected.__name__}")
        else:
            wrong.append(f"{cell}: allowed, expected {expected.__name__}")
        if await snapshot(store) != before:
            wrong.append(f"{cell}: the store changed")
            before = await snapshot(store)
    assert wrong == []


CAN: list[tuple[str, str, tuple[Any, ...]]] = [
    ("alice", "org.disable", ("C",)),
    ("alice", "role.grant", ("ua", "proxy_viewer")),
    ("olga", "team.create", ("A",)),
    ("olga", "team.update", ("a2",)),
    ("olga", "team.disable", ("xa",)),
    ("olga", "user.create", ("A",)),
    ("olga", "user.disable", ("ua",)),
    ("olga", "role.grant", ("ua", "org_admin", "A")),
    ("olga", "role.grant", ("ua", "team_admin", None, "a2")),
    ("olga", "role.revoke", ("tom", "team_admin", None, "a1")),
    ("olga", "key.revoke", ("mia",)),
    ("tom", "project.create", ("a1",)),
    ("tom", "project.disable", ("a1",)),
    ("tom", "key.create", ("a1",)),
    ("tom", "key.rotate", ("mo",)),
    ("tom", "role.grant", ("ua", "member", None, "a1")),
    ("tom", "role.revoke", ("val", "viewer", None, "a1")),
    ("mia", "key.create", ("a1",)),
    ("mia", "key.revoke", ("mia",)),
    ("mia", "key.rotate", ("mia",)),
    ("mia", "key.update", ("mia",)),
    ("mia", "token.create", ("mia",)),
    ("mia", "token.revoke", ("mia",)),
]


@pytest.mark.parametrize(("user", "name", "args"), CAN)
async def test_a_write_inside_the_role_changes_the_store_and_is_audited(
    tenancy: Tenancy, store: Store, user: str, name: str, args: tuple[Any, ...]
) -> None:
    world = await build_world(tenancy)
    actor = await world.actor(user)
    before = await snapshot(store)
    await OPS[name](*args)(tenancy, actor, world)
    after = await snapshot(store)
    assert after != before
    # one event per write, and one per admin token a disabled user loses (ua holds one)
    cascaded = 1 if name == "user.disable" else 0
    assert len(after["audit_events"]) == len(before["audit_events"]) + 1 + cascaded
