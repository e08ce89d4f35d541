"""The configuration's organisations and teams synced into the store at start-up."""

from __future__ import annotations

import asyncio

import pytest

from fairgate.auth.secrets import sha256
from fairgate.core.errors import BadRequest
from fairgate.store import Store, StoreKeyDirectory
from fairgate.tenancy import Tenancy
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


async def test_a_team_moved_to_another_org_in_the_configuration_moves(tenancy: Tenancy) -> None:
    await tenancy.sync_orgs([Declared("A", 0.5, ("t",)), Declared("B", 0.5)])
    await tenancy.sync_orgs([Declared("A", 0.5), Declared("B", 0.5, ("t",))])
    team = await tenancy.teams.get(OPERATOR, "t")
    assert (team.org, team.disabled_at) == ("B", None)


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
