"""Keys through the service: secret shown once, stored as a digest, revoke, rotate with a grace."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from fairgate.auth.secrets import looks_like_key, sha256
from fairgate.core.errors import BadRequest, NotFound
from fairgate.store import Store, StoreKeyDirectory
from fairgate.store.tables import keys as keys_table
from fairgate.tenancy import Limits, Tenancy
from store.backends import FakeClock
from tenancy.world import DECLARED, OPERATOR


@pytest.fixture
async def synced(tenancy: Tenancy) -> Tenancy:
    await tenancy.sync_orgs(DECLARED)
    return tenancy


async def test_a_new_key_is_shown_once_and_only_its_digest_is_stored(
    synced: Tenancy, store: Store
) -> None:
    new = await synced.keys.create(OPERATOR, team="a1", name="ci", limits=Limits(rpm=60))
    assert looks_like_key(new.secret)
    assert new.secret.startswith(new.key.prefix) and len(new.key.prefix) == 11
    async with store.read() as conn:
        rows = (await conn.execute(select(keys_table))).mappings().all()
    assert len(rows) == 1
    stored = dict(rows[0])
    assert stored["secret_sha256"] == sha256(new.secret)
    assert all(new.secret not in str(value) for value in stored.values())
    listed = await synced.keys.list(OPERATOR)
    assert [k.id for k in listed] == [new.key.id]
    assert (listed[0].team, listed[0].org, listed[0].rpm) == ("a1", "A", 60)


async def test_the_directory_finds_a_key_by_its_secret_with_its_team_list_and_org(
    synced: Tenancy, store: Store
) -> None:
    await synced.teams.update(OPERATOR, "a1", models=["llama-70b"], limits=Limits(rpm=10, tpm=99))
    new = await synced.keys.create(
        OPERATOR, team="a1", models=["llama70b"], tags=["ci"], limits=Limits(rpm=5)
    )
    record = await StoreKeyDirectory(store).find_key(sha256(new.secret), 0.0)
    assert record is not None
    assert (record.key_id, record.org, record.team) == (new.key.id, "A", "a1")
    assert record.team_models == ("llama-70b",) and record.models == ("llama70b",)
    assert record.tags == ("ci",)
    # the key narrows rpm; the team fills the gap
    assert (record.limits.rpm, record.limits.tpm) == (5, 99)
    assert record.revoked_at is None
    assert await StoreKeyDirectory(store).find_key(sha256("fg-unknown"), 0.0) is None


async def test_a_revoked_key_is_still_found_and_carries_its_revocation(
    synced: Tenancy, store: Store, clock: FakeClock
) -> None:
    new = await synced.keys.create(OPERATOR, team="a1")
    clock.advance(10)
    revoked = await synced.keys.revoke(OPERATOR, new.key.id)
    assert revoked.revoked_at is not None and revoked.revoked_at.timestamp() == clock.now
    again = await synced.keys.revoke(OPERATOR, new.key.id)  # a no-op, not an error
    assert again.revoked_at == revoked.revoked_at
    record = await StoreKeyDirectory(store).find_key(sha256(new.secret), clock.now)
    assert record is not None and record.revoked_at == clock.now
    with pytest.raises(BadRequest):
        await synced.keys.rotate(OPERATOR, new.key.id)


async def test_rotation_keeps_the_id_and_the_old_secret_until_the_grace_ends(
    synced: Tenancy, store: Store, clock: FakeClock
) -> None:
    old = await synced.keys.create(OPERATOR, team="a1")
    new = await synced.keys.rotate(OPERATOR, old.key.id, grace=3600)
    assert new.key.id == old.key.id and new.secret != old.secret
    assert new.key.previous_until is not None
    assert new.key.previous_until.timestamp() == clock.now + 3600
    directory = StoreKeyDirectory(store)
    by_new = await directory.find_key(sha256(new.secret), clock.now)
    by_old = await directory.find_key(sha256(old.secret), clock.now)
    assert by_new is not None and by_old is not None
    assert by_new.key_id == by_old.key_id == old.key.id
    assert by_old.previous_sha256 == sha256(old.secret)
    assert by_old.previous_until == clock.now + 3600
    assert by_new.secret_sha256 == sha256(new.secret)


async def test_rotation_without_grace_drops_the_old_secret_at_once(
    synced: Tenancy, store: Store
) -> None:
    old = await synced.keys.create(OPERATOR, team="a1")
    new = await synced.keys.rotate(OPERATOR, old.key.id, grace=0)
    directory = StoreKeyDirectory(store)
    assert await directory.find_key(sha256(old.secret), 0.0) is None
    assert await directory.find_key(sha256(new.secret), 0.0) is not None


async def test_a_key_of_a_disabled_team_or_project_is_refused_like_a_revoked_one(
    synced: Tenancy, store: Store, clock: FakeClock
) -> None:
    await synced.teams.create(OPERATOR, org="A", name="extra")
    await synced.projects.create(OPERATOR, team="a1", name="p")
    in_team = await synced.keys.create(OPERATOR, team="extra")
    in_project = await synced.keys.create(OPERATOR, team="a1", project="p")
    clock.advance(5)
    await synced.teams.disable(OPERATOR, "extra")
    await synced.projects.disable(OPERATOR, team="a1", name="p")
    directory = StoreKeyDirectory(store)
    for new in (in_team, in_project):
        record = await directory.find_key(sha256(new.secret), clock.now)
        assert record is not None and record.revoked_at == clock.now
    assert set(await directory.key_changes(clock.now - 1)) == {in_team.key.id, in_project.key.id}
    assert await directory.key_changes(clock.now) == []


async def test_key_changes_lists_revoked_and_rotated_keys_since_a_moment(
    synced: Tenancy, store: Store, clock: FakeClock
) -> None:
    a = await synced.keys.create(OPERATOR, team="a1")
    b = await synced.keys.create(OPERATOR, team="a1")
    c = await synced.keys.create(OPERATOR, team="a2")
    mark = clock.now
    clock.advance(1)
    await synced.keys.revoke(OPERATOR, a.key.id)
    await synced.keys.rotate(OPERATOR, b.key.id, grace=60)
    assert sorted(await StoreKeyDirectory(store).key_changes(mark)) == sorted([a.key.id, b.key.id])
    assert c.key.id not in await StoreKeyDirectory(store).key_changes(mark)


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"models": ["no-such-model"]}, "model_not_found"),
        ({"limits": Limits}, None),
        ({"expires_in": -1.0}, "invalid_expiry"),
        ({"name": "bad name"}, "invalid_name"),
        ({"tags": [f"t{i}" for i in range(9)]}, "too_many"),
        ({"project": "nope"}, "project_not_found"),
    ],
)
async def test_invalid_key_requests_are_refused_and_nothing_is_stored(
    synced: Tenancy, kwargs: dict[str, object], code: str | None
) -> None:
    if kwargs.get("limits") is Limits:
        with pytest.raises(BadRequest, match="rpm"):
            Limits(rpm=0)
        return
    with pytest.raises((BadRequest, NotFound)) as refused:
        await synced.keys.create(OPERATOR, team="a1", **kwargs)  # type: ignore[arg-type]
    assert refused.value.code == code
    assert await synced.keys.list(OPERATOR) == []


async def test_an_empty_allowlist_is_kept_apart_from_no_allowlist(
    synced: Tenancy, store: Store
) -> None:
    none = await synced.keys.create(OPERATOR, team="a1", models=[])
    every = await synced.keys.create(OPERATOR, team="a1")
    directory = StoreKeyDirectory(store)
    found_none = await directory.find_key(sha256(none.secret), 0.0)
    found_every = await directory.find_key(sha256(every.secret), 0.0)
    assert found_none is not None and found_none.models == ()
    assert found_every is not None and found_every.models is None


async def test_expiry_is_stored_and_handed_to_authentication(
    synced: Tenancy, store: Store, clock: FakeClock
) -> None:
    new = await synced.keys.create(OPERATOR, team="a1", expires_in=30 * 86400)
    record = await StoreKeyDirectory(store).find_key(sha256(new.secret), clock.now)
    assert record is not None and record.expires_at == clock.now + 30 * 86400
