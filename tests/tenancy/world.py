"""A small tree with two organisations and a user in every role, built through the services.

    org A (declared): teams a1, a2 (declared), xa (created by the API); projects a1/p, a2/p
    org B (declared): team b1 (declared), xb (API); project b1/p
    org C (created by the API, no share)

    alice  proxy_admin            pat  proxy_viewer
    olga   org_admin on A         bob  org_admin on B
    tom    team_admin on a1       mia  member on a1       mo  member on a1
    vic    viewer on A            val  viewer on a1
    ua     no role, home org A    ub   no role, home org B

Keys: ``a1`` (made by the operator), ``mia`` and ``mo`` (theirs, in a1), ``a2``, ``b1``.
Every user has one admin token; ``actor(name)`` resolves it as the admin API does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fairgate.tenancy import Actor, Tenancy

OPERATOR = Actor.operator("test")


@dataclass(frozen=True)
class Declared:
    name: str
    share: float
    teams: tuple[str, ...] = ()


DECLARED = (Declared("A", 0.6, ("a1", "a2")), Declared("B", 0.4, ("b1",)))

BINDINGS = {
    "alice": ("proxy_admin", None, None),
    "pat": ("proxy_viewer", None, None),
    "olga": ("org_admin", "A", None),
    "bob": ("org_admin", "B", None),
    "tom": ("team_admin", None, "a1"),
    "mia": ("member", None, "a1"),
    "mo": ("member", None, "a1"),
    "vic": ("viewer", "A", None),
    "val": ("viewer", None, "a1"),
}
HOMES = {
    "olga": "A",
    "tom": "A",
    "mia": "A",
    "mo": "A",
    "vic": "A",
    "val": "A",
    "ua": "A",
    "bob": "B",
    "ub": "B",
}


@dataclass
class World:
    tenancy: Tenancy
    keys: dict[str, str] = field(default_factory=dict)  # label -> key id
    tokens: dict[str, str] = field(default_factory=dict)  # user -> token secret
    token_ids: dict[str, str] = field(default_factory=dict)  # user -> token id

    async def actor(self, user: str) -> Actor:
        actor = await self.tenancy.admin_tokens.authenticate(self.tokens[user])
        assert actor is not None, user
        return actor


async def build_world(tenancy: Tenancy) -> World:
    world = World(tenancy)
    await tenancy.sync_orgs(DECLARED)
    await tenancy.orgs.create(OPERATOR, "C")
    await tenancy.teams.create(OPERATOR, org="A", name="xa")
    await tenancy.teams.create(OPERATOR, org="B", name="xb")
    for team in ("a1", "a2", "b1"):
        await tenancy.projects.create(OPERATOR, team=team, name="p")
    for user in ["alice", "pat", "olga", "bob", "tom", "mia", "mo", "vic", "val", "ua", "ub"]:
        await tenancy.users.create(OPERATOR, user, org=HOMES.get(user))
        if user in BINDINGS:
            role, org, team = BINDINGS[user]
            await tenancy.roles.grant(OPERATOR, user=user, role=role, org=org, team=team)
        new = await tenancy.admin_tokens.create(OPERATOR, user=user)
        world.tokens[user] = new.secret
        world.token_ids[user] = new.token.id
    for team in ("a1", "a2", "b1"):
        world.keys[team] = (await tenancy.keys.create(OPERATOR, team=team)).key.id
    for member in ("mia", "mo"):
        actor = await world.actor(member)
        world.keys[member] = (await tenancy.keys.create(actor, team="a1")).key.id
    return world
