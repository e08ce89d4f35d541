"""People known by an access token, on SQLite and PostgreSQL: the synthetic key, moves,
concurrent first sight, revocation (ahead of first sight too), restore, exchanged keys."""

from __future__ import annotations

import asyncio

import pytest

from fairgate.auth import sha256
from fairgate.auth.jwt import Placement, person_key_id
from fairgate.core.limits import Limits
from fairgate.store import Store, StoreKeyDirectory
from fairgate.tenancy import Actor, Tenancy
from fairgate.tenancy.errors import BadRequest, Forbidden
from tenancy.test_access_changes import feed, newest
from tenancy.world import DECLARED, OPERATOR

ISS = "https://sso.example.org/realms/r"
LIMITS = Limits(rpm=60, max_in_flight=2)


async def test_a_person_is_one_key_row_created_once_and_moved_with_the_map(
    tenancy: Tenancy, store: Store
) -> None:
    await tenancy.sync_orgs(DECLARED)
    key_id = person_key_id(ISS, "ada")
    first = await tenancy.people.person(key_id, ISS, "ada", Placement("a1", None), LIMITS)
    assert first is not None
    assert (first.key_id, first.team, first.org, first.project) == (key_id, "a1", "A", None)
    assert (first.limits.rpm, first.limits.max_in_flight, first.revoked_at) == (60, 2, None)
    again = await tenancy.people.person(key_id, ISS, "ada", Placement("a1", None), LIMITS)
    assert again == first
    await tenancy.projects.create(OPERATOR, team="a2", name="p")
    before = await newest(store)
    moved = await tenancy.people.person(key_id, ISS, "ada", Placement("a2", "p"), LIMITS)
    assert moved is not None and (moved.team, moved.project) == ("a2", "p")
    assert ("key", key_id) in await feed(store, before)  # cached tokens forget the old team
    assert await tenancy.people.person(key_id, ISS, "ada", Placement("nope", None), LIMITS) is None
    listed = await tenancy.people.list(OPERATOR)
    assert [(p.subject, p.team, p.project) for p in listed] == [("ada", "a2", "p")]


async def test_two_first_sights_at_once_make_one_person(tenancy: Tenancy, store: Store) -> None:
    await tenancy.sync_orgs(DECLARED)
    key_id = person_key_id(ISS, "bo")
    others = [
        Tenancy(store).people for _ in range(4)
    ]  # as several replicas: none remembers the person
    records = await asyncio.gather(
        *(p.person(key_id, ISS, "bo", Placement("a1", None), LIMITS) for p in others)
    )
    assert {r.key_id for r in records if r is not None} == {key_id}
    assert len(await tenancy.people.list(OPERATOR)) == 1


async def test_revoked_ahead_restored_and_the_exchanged_keys_follow(
    tenancy: Tenancy, store: Store
) -> None:
    await tenancy.sync_orgs(DECLARED)
    key_id = person_key_id(ISS, "cy")
    before = await newest(store)
    assert await tenancy.people.revoke(OPERATOR, issuer=ISS, subject="cy") == key_id
    assert ("key", key_id) in await feed(store, before)
    record = await tenancy.people.person(key_id, ISS, "cy", Placement("a1", None), LIMITS)
    assert record is not None and record.revoked_at is not None  # revoked before first sight
    await tenancy.people.restore(OPERATOR, issuer=ISS, subject="cy")
    record = await tenancy.people.person(key_id, ISS, "cy", Placement("a1", None), LIMITS)
    assert record is not None and record.revoked_at is None

    secret, expires_at = await tenancy.people.exchange_key(key_id, ttl=600)
    directory = StoreKeyDirectory(store)
    found = await directory.find_key(sha256(secret), 0)
    assert found is not None and found.key_id == key_id and found.expires_at == expires_at
    await tenancy.people.revoke(OPERATOR, issuer=ISS, subject="cy")
    found = await directory.find_key(sha256(secret), 0)
    assert found is not None and found.revoked_at is not None
    revoked = await tenancy.people.list(OPERATOR, revoked_only=True)
    assert [p.subject for p in revoked] == ["cy"]


@pytest.mark.parametrize("name", ["olga", "tom", "mia"])
async def test_only_proxy_admins_revoke(tenancy: Tenancy, name: str) -> None:
    actor = Actor(name=f"user:{name}")
    with pytest.raises(Forbidden):
        await tenancy.people.revoke(actor, issuer=ISS, subject="dee")
    with pytest.raises(Forbidden):
        await tenancy.people.list(actor)


async def test_a_persons_key_has_no_secret_to_rotate(tenancy: Tenancy) -> None:
    await tenancy.sync_orgs(DECLARED)
    key_id = person_key_id(ISS, "eve")
    assert await tenancy.people.person(key_id, ISS, "eve", Placement("a1", None), LIMITS)
    with pytest.raises(BadRequest) as refused:
        await tenancy.keys.rotate(OPERATOR, key_id)
    assert refused.value.code == "person_key"
