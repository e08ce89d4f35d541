"""People known by an access token, on SQLite and PostgreSQL: the synthetic key, moves,
concurrent first sight, revocation (ahead of first sight too), restore, exchanged keys and
their bound: one person holds at most ``keep`` unexpired exchanged keys, on every replica."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import func, select

from fairgate.auth import sha256
from fairgate.auth.jwt import Placement, person_key_id
from fairgate.core.limits import Limits
from fairgate.store import Store, StoreKeyDirectory
from fairgate.store.tables import person_keys
from fairgate.tenancy import Actor, Tenancy
from fairgate.tenancy.errors import BadRequest, Forbidden
from store.backends import FakeClock
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

    secret, expires_at, revoked = await tenancy.people.exchange_key(key_id, ttl=600, keep=100)
    assert revoked == 0
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


async def _live_keys(store: Store, key_id: str) -> int:
    async with store.read() as conn:
        query = select(func.count()).where(person_keys.c.key_id == key_id)
        return int((await conn.execute(query)).scalar_one())


async def test_one_token_exchanged_over_and_over_keeps_keep_keys_and_the_oldest_is_revoked(
    tenancy: Tenancy, store: Store, store_url: str, clock: FakeClock
) -> None:
    """The attack: one workload token exchanged 60 times, 48 of them at once on four
    replicas with their own connections; the person never holds more than ``keep`` keys."""
    await tenancy.sync_orgs(DECLARED)
    key_id = person_key_id(ISS, "job")
    assert await tenancy.people.person(key_id, ISS, "job", Placement("a1", None), LIMITS)
    directory = StoreKeyDirectory(store)
    first = (await tenancy.people.exchange_key(key_id, ttl=600, keep=5)).secret
    assert await directory.find_key(sha256(first), 0) is not None
    before = await newest(store)
    given, revoked = [], []
    for _ in range(12):
        clock.advance(1)
        exchanged = await tenancy.people.exchange_key(key_id, ttl=600, keep=5)
        given.append(exchanged.secret)
        revoked.append(exchanged.revoked)
    assert await _live_keys(store, key_id) == 5
    assert revoked == [0] * 4 + [1] * 8  # each exchange past the five says it revoked one
    assert await directory.find_key(sha256(first), 0) is None  # the oldest went first
    assert ("key", key_id) in await feed(store, before)  # and every replica's cache drops it
    for secret in given[-5:]:
        assert await directory.find_key(sha256(secret), 0) is not None

    replicas = [Store(store_url) for _ in range(4)]
    try:
        for replica in replicas:
            await replica.connect()
        clock.advance(1)
        at_once = await asyncio.gather(
            *(
                Tenancy(replica, clock=clock).people.exchange_key(key_id, ttl=600, keep=5)
                for replica in replicas
                for _ in range(12)
            )
        )
    finally:
        for replica in replicas:
            await replica.close()
    assert await _live_keys(store, key_id) == 5
    served = [
        s for s in given + [e.secret for e in at_once] if await directory.find_key(sha256(s), 0)
    ]
    assert len(served) == 5 and not set(served) & set(given)  # the older ones all revoked


async def test_keys_of_another_person_and_expired_keys_do_not_count(
    tenancy: Tenancy, store: Store, clock: FakeClock
) -> None:
    await tenancy.sync_orgs(DECLARED)
    job, other = person_key_id(ISS, "job"), person_key_id(ISS, "other")
    for key_id, sub in ((job, "job"), (other, "other")):
        assert await tenancy.people.person(key_id, ISS, sub, Placement("a1", None), LIMITS)
    others = [(await tenancy.people.exchange_key(other, ttl=600, keep=2)).secret for _ in range(2)]
    short = (await tenancy.people.exchange_key(job, ttl=10, keep=2)).secret
    clock.advance(11)
    kept = [(await tenancy.people.exchange_key(job, ttl=600, keep=2)).secret for _ in range(2)]
    directory = StoreKeyDirectory(store)
    for secret in others + kept:
        assert await directory.find_key(sha256(secret), 0) is not None
    assert await directory.find_key(sha256(short), 0) is None
    assert (await _live_keys(store, job), await _live_keys(store, other)) == (2, 2)
    clock.advance(1)
    last = (await tenancy.people.exchange_key(job, ttl=600, keep=1)).secret  # a cap lowered
    assert (await _live_keys(store, job), await _live_keys(store, other)) == (1, 2)
    assert await directory.find_key(sha256(last), 0) is not None
