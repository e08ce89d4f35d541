"""The configuration's organisations and teams synced into the store at start-up."""

from __future__ import annotations

import asyncio

import pytest

from fairgate.auth.secrets import sha256
from fairgate.core.errors import BadRequest, NotFound
from fairgate.core.money import Money
from fairgate.store import Store, StoreKeyDirectory
from fairgate.tenancy import Actor, ConfigConflict, Conflict, Tenancy, declared_teams
from store.backends import FakeClock
from tenancy.world import OPERATOR, Declared


async def test_declared_orgs_and_teams_are_created_with_their_shares(tenancy: Tenancy) -> None:
    report = await tenancy.sync_orgs([Declared("A", 0.75, ("a1", "a2")), Declared("B", 0.25)])
    assert sorted(report.created) == ["org:A", "org:B", "team:a1", "team:a2"]
    orgs = {o.name: o for o in await tenancy.orgs.list(OPERATOR)}
    assert (orgs["A"].share, orgs["A"].declared) == (0.75, True)
    assert {t.name: t.org for t in await tenancy.teams.list(OPERATOR)} == {"a1": "A", "a2": "A"}


async def test_syncing_twice_changes_nothing(tenancy: Tenancy) -> None:
    declared = [Declared("A", 0.5, ("a1",))]
    await tenancy.sync_orgs(declared)
    report = await tenancy.sync_orgs(declared)
    assert (report.created, report.enabled, report.disabled) == ([], [], [])


async def test_an_org_removed_from_the_configuration_is_disabled_not_deleted(
    tenancy: Tenancy, store: Store, clock: FakeClock
) -> None:
    await tenancy.sync_orgs([Declared("A", 0.5, ("a1",)), Declared("B", 0.5, ("b1",))])
    key = await tenancy.keys.create(OPERATOR, team="b1")
    clock.advance(60)
    report = await tenancy.sync_orgs([Declared("A", 0.5, ("a1",))])
    assert sorted(report.disabled) == ["org:B", "team:b1"]
    b = await tenancy.orgs.get(OPERATOR, "B")
    assert b.disabled_at is not None and not b.declared
    record = await StoreKeyDirectory(store).find_key(sha256(key.secret), clock.now)
    assert record is not None and record.revoked_at == clock.now  # refused from now on
    assert [k.id for k in await tenancy.keys.list(OPERATOR)] == [key.key.id]  # still listed

    report = await tenancy.sync_orgs([Declared("A", 0.5, ("a1",)), Declared("B", 0.5, ("b1",))])
    assert sorted(report.enabled) == ["org:B", "team:b1"]
    record = await StoreKeyDirectory(store).find_key(sha256(key.secret), clock.now)
    assert record is not None and record.revoked_at is None


async def test_a_team_the_configuration_created_moves_when_the_configuration_moves_it(
    tenancy: Tenancy,
) -> None:
    await tenancy.sync_orgs([Declared("A", 0.5, ("t",)), Declared("B", 0.5)])
    assert (await tenancy.teams.get(OPERATOR, "t")).from_config
    await tenancy.sync_orgs([Declared("A", 0.5), Declared("B", 0.5, ("t",))])
    team = await tenancy.teams.get(OPERATOR, "t")
    assert (team.org, team.disabled_at) == ("B", None)
    moved = await tenancy.audit.list(OPERATOR, action="team.moved")
    assert [event.target for event in moved] == ["team:t"]


async def test_a_moved_teams_budgets_move_with_it_out_of_the_old_orgs_reach(
    tenancy: Tenancy,
) -> None:
    await tenancy.sync_orgs([Declared("A", 0.5, ("t",)), Declared("B", 0.5)])
    key = await tenancy.keys.create(OPERATOR, team="t")
    for scope in ("team:t", f"key:{key.key.id}"):
        await tenancy.budgets.set(OPERATOR, scope=scope, period="month", max=Money(100))
    olga, bob = await _admin(tenancy, "olga", "A"), await _admin(tenancy, "bob", "B")
    assert len(await tenancy.budgets.list(olga)) == 2 and await tenancy.budgets.list(bob) == []

    await tenancy.sync_orgs([Declared("A", 0.5), Declared("B", 0.5, ("t",))])
    assert await tenancy.budgets.list(olga) == []
    assert len(await tenancy.budgets.list(bob)) == 2
    with pytest.raises(NotFound):
        await tenancy.budgets.set(olga, scope="team:t", period="month", max=Money(10**9))
    await tenancy.budgets.set(bob, scope="team:t", period="month", max=Money(50))


async def _admin(tenancy: Tenancy, user: str, org: str) -> Actor:
    """A new user holding org_admin on ``org``, as its admin token resolves it."""
    await tenancy.users.create(OPERATOR, user, org=org)
    await tenancy.roles.grant(OPERATOR, user=user, role="org_admin", org=org)
    actor = await tenancy.admin_tokens.authenticate(
        (await tenancy.admin_tokens.create(OPERATOR, user=user)).secret
    )
    assert actor is not None
    return actor


async def _squat(tenancy: Tenancy) -> str:
    """An admin of A takes the free name "physics"; returns the id of a key in it."""
    await tenancy.sync_orgs([Declared("A", 0.5), Declared("B", 0.5)])
    olga = await _admin(tenancy, "olga", "A")
    team = await tenancy.teams.create(olga, org="A", name="physics")
    assert not team.from_config
    return (await tenancy.keys.create(olga, team="physics")).key.id


async def test_a_team_made_through_the_api_is_never_moved_by_the_configuration(
    tenancy: Tenancy,
) -> None:
    key_id = await _squat(tenancy)
    with pytest.raises(ConfigConflict) as refused:
        await tenancy.sync_orgs(
            [Declared("A", 0.4), Declared("B", 0.4, ("physics",)), Declared("N", 0.2, ("n1",))]
        )
    message = refused.value.message
    assert "'physics'" in message and "'A'" in message and "'B'" in message
    assert "another name" in message
    team = await tenancy.teams.get(OPERATOR, "physics")
    assert (team.org, team.declared, team.disabled_at) == ("A", False, None)
    assert [k.org for k in await tenancy.keys.list(OPERATOR) if k.id == key_id] == ["A"]
    # One transaction: nothing else of that configuration was applied either.
    assert "N" not in {org.name for org in await tenancy.orgs.list(OPERATOR)}
    assert await tenancy.audit.list(OPERATOR, action="team.moved") == []


async def test_a_team_made_through_the_api_and_adopted_by_its_own_org_still_never_moves(
    tenancy: Tenancy,
) -> None:
    await _squat(tenancy)
    await tenancy.sync_orgs([Declared("A", 0.5, ("physics",)), Declared("B", 0.5)])
    adopted = await tenancy.teams.get(OPERATOR, "physics")
    assert (adopted.org, adopted.declared, adopted.from_config) == ("A", True, False)
    with pytest.raises(ConfigConflict, match="'physics'"):
        await tenancy.sync_orgs([Declared("A", 0.5), Declared("B", 0.5, ("physics",))])
    assert (await tenancy.teams.get(OPERATOR, "physics")).org == "A"


async def test_a_name_the_configuration_declares_cannot_be_taken_through_the_services(
    store: Store, clock: FakeClock
) -> None:
    """The window before the sync: the configuration names "physics", the store has none yet."""
    before = Tenancy(store, clock=clock)
    await before.sync_orgs([Declared("A", 0.5), Declared("B", 0.5)])
    tenancy = Tenancy(
        store, clock=clock, declared_teams=declared_teams([Declared("B", 0.5, ("physics",))])
    )
    with pytest.raises(Conflict) as refused:
        await tenancy.teams.create(OPERATOR, org="A", name="physics")
    assert refused.value.code == "team_name_reserved"
    assert "'B'" not in refused.value.message
    assert await tenancy.teams.list(OPERATOR) == []
    await tenancy.teams.create(OPERATOR, org="A", name="chemistry")  # any other name is free


async def test_orgs_made_through_the_api_borrow_only_and_survive_the_sync(tenancy: Tenancy) -> None:
    await tenancy.orgs.create(OPERATOR, "guests")
    await tenancy.sync_orgs([Declared("A", 1.0)])
    guests = await tenancy.orgs.get(OPERATOR, "guests")
    assert (guests.share, guests.declared, guests.disabled_at) == (None, False, None)


async def test_a_declared_org_or_team_cannot_be_disabled_through_the_services(
    tenancy: Tenancy,
) -> None:
    await tenancy.sync_orgs([Declared("A", 1.0, ("a1",))])
    with pytest.raises(BadRequest, match="configuration"):
        await tenancy.orgs.disable(OPERATOR, "A")
    with pytest.raises(BadRequest, match="configuration"):
        await tenancy.teams.disable(OPERATOR, "a1")


async def test_workers_starting_together_sync_once_without_conflict(
    store: Store, store_url: str
) -> None:
    """Four processes' stores on one (empty) database, syncing at the same moment."""
    declared = [Declared("A", 0.5, ("a1", "a2")), Declared("B", 0.5, ("b1",))]
    stores = [Store(store_url) for _ in range(4)]
    for s in stores:
        await s.connect()
    try:
        reports = await asyncio.wait_for(
            asyncio.gather(*(Tenancy(s).sync_orgs(declared) for s in stores)), timeout=60
        )
        assert sorted(name for r in reports for name in r.created) == [
            "org:A",
            "org:B",
            "team:a1",
            "team:a2",
            "team:b1",
        ]
    finally:
        for s in stores:
            await s.close()
