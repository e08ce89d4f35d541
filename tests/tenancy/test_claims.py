"""Claim links: a key handed over once by a link; the store alone opens nothing.

Every test runs on SQLite and PostgreSQL (the ``store`` fixture).
"""

from __future__ import annotations

import asyncio
import base64

import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from sqlalchemy import select, update

from fairgate.auth.secrets import looks_like_key, sha256
from fairgate.core.errors import BadRequest, Forbidden
from fairgate.store import Store
from fairgate.store.tables import audit_events, claim_links, keys, metadata
from fairgate.tenancy import ClaimCreated, Tenancy
from fairgate.tenancy.sealing import new_token
from store.backends import FakeClock
from tenancy.conftest import MODELS
from tenancy.world import DECLARED, OPERATOR, build_world

BASE = "https://gw.example.org/llm"


@pytest.fixture
async def claims_tenancy(store: Store, clock: FakeClock) -> Tenancy:
    tenancy = Tenancy(store, clock=clock, models=MODELS, public_url=BASE + "/")
    await tenancy.sync_orgs(DECLARED)
    return tenancy


async def _rows(store: Store) -> list[dict[str, object]]:
    async with store.read() as conn:
        return [dict(r) for r in (await conn.execute(select(claim_links))).mappings().all()]


async def _every_value(store: Store) -> list[object]:
    """Every value of every row of every table."""
    values: list[object] = []
    async with store.read() as conn:
        for table in metadata.sorted_tables:
            for row in (await conn.execute(select(table))).all():
                values.extend(row)
    return values


async def test_a_link_gives_the_secret_once_and_its_key_works(
    claims_tenancy: Tenancy, store: Store
) -> None:
    made = await claims_tenancy.claims.create(OPERATOR, team="a1", name="for-ann")
    assert made.url == f"{BASE}/claim/{made.token}"
    assert made.key.name == "for-ann" and made.key.team == "a1"
    assert not any(looks_like_key(str(v)) for v in vars_of(made))
    assert await claims_tenancy.claims.peek(made.token)
    assert await claims_tenancy.claims.peek(made.token)  # looking twice consumes nothing
    secret = await claims_tenancy.claims.redeem(made.token)
    assert secret is not None and looks_like_key(secret)
    async with store.read() as conn:
        stored = (
            await conn.execute(select(keys.c.secret_sha256).where(keys.c.id == made.key.id))
        ).scalar_one()
    assert stored == sha256(secret)
    assert await claims_tenancy.claims.redeem(made.token) is None
    assert not await claims_tenancy.claims.peek(made.token)
    (row,) = await _rows(store)
    assert row["claimed_at"] is not None
    assert row["sealed"] is None  # wiped: nothing left to open even with the token


def vars_of(made: ClaimCreated) -> list[object]:
    return [made.token, made.url, made.expires_at, *vars_of_key(made)]


def vars_of_key(made: ClaimCreated) -> list[object]:
    return [getattr(made.key, f) for f in made.key.__dataclass_fields__]


async def test_the_database_alone_opens_nothing(claims_tenancy: Tenancy, store: Store) -> None:
    made = await claims_tenancy.claims.create(OPERATOR, team="a1")
    (row,) = await _rows(store)
    sealed = bytes(row["sealed"])  # type: ignore[arg-type]
    # Attack it from the row alone: every value of every table, as the AES key directly and
    # as HKDF input under the link's own label, over the stored nonce and ciphertext.
    candidates = [v if isinstance(v, bytes) else str(v).encode() for v in await _every_value(store)]
    nonce, body = sealed[:12], sealed[12:]
    aad = made.key.id.encode()
    for value in candidates:
        keys_tried = [
            HKDF(SHA256(), 32, None, b"fairgate claim-link seal v1").derive(value),
            *([value] if len(value) in (16, 24, 32) else []),
        ]
        for key in keys_tried:
            with pytest.raises(InvalidTag):
                AESGCM(key).decrypt(nonce, body, aad)
    # Neither the token nor the secret is anywhere in the store, as text or as raw bytes.
    secret = await claims_tenancy.claims.redeem(made.token)
    assert secret is not None
    needles = [
        made.token.encode(),
        base64.urlsafe_b64decode(made.token + "="),
        secret.encode(),
        base64.urlsafe_b64decode(secret[3:] + "="),
    ]
    for value in candidates:
        assert not any(needle in value for needle in needles)


@pytest.mark.parametrize("racers", [8])
async def test_concurrent_redeems_give_one_secret(
    claims_tenancy: Tenancy, store: Store, racers: int
) -> None:
    made = await claims_tenancy.claims.create(OPERATOR, team="a1")
    got = await asyncio.gather(*(claims_tenancy.claims.redeem(made.token) for _ in range(racers)))
    winners = [g for g in got if g is not None]
    assert len(winners) == 1, got
    (row,) = await _rows(store)
    assert row["claimed_at"] is not None and row["sealed"] is None
    async with store.read() as conn:
        redeemed = (
            await conn.execute(
                select(audit_events.c.detail).where(audit_events.c.action == "claim_link.redeemed")
            )
        ).all()
    assert len(redeemed) == 1


async def test_two_gateways_on_one_database_redeem_a_link_once(
    claims_tenancy: Tenancy, store: Store, store_url: str, clock: FakeClock
) -> None:
    made = await claims_tenancy.claims.create(OPERATOR, team="a1")
    other_store = Store(store_url)
    await other_store.connect()
    try:
        other = Tenancy(other_store, clock=clock, models=MODELS, public_url=BASE)
        racers = [claims_tenancy.claims.redeem(made.token) for _ in range(4)]
        racers += [other.claims.redeem(made.token) for _ in range(4)]
        got = await asyncio.gather(*racers)
    finally:
        await other_store.close()
    assert len([g for g in got if g is not None]) == 1, got
    (row,) = await _rows(store)
    assert row["claimed_at"] is not None and row["sealed"] is None


async def test_an_expired_link_opens_nothing_and_stays_unclaimed(
    claims_tenancy: Tenancy, store: Store, clock: FakeClock
) -> None:
    made = await claims_tenancy.claims.create(OPERATOR, team="a1", expires_in=3600)
    clock.advance(3599)
    assert await claims_tenancy.claims.peek(made.token)
    clock.advance(2)
    assert not await claims_tenancy.claims.peek(made.token)
    assert await claims_tenancy.claims.redeem(made.token) is None
    (row,) = await _rows(store)
    assert row["claimed_at"] is None


@pytest.mark.parametrize(
    "token", ["", "x", "A" * 43, "A" * 4000, "é" * 43, "../../etc/passwd", "%00" * 15]
)
async def test_malformed_tokens_answer_like_unknown_ones(
    claims_tenancy: Tenancy, token: str
) -> None:
    await claims_tenancy.claims.create(OPERATOR, team="a1")
    assert not await claims_tenancy.claims.peek(token)
    assert await claims_tenancy.claims.redeem(token) is None
    unknown, _ = new_token()
    assert not await claims_tenancy.claims.peek(unknown)
    assert await claims_tenancy.claims.redeem(unknown) is None


async def test_a_revoked_or_rotated_key_is_not_handed_over(claims_tenancy: Tenancy) -> None:
    revoked = await claims_tenancy.claims.create(OPERATOR, team="a1")
    await claims_tenancy.keys.revoke(OPERATOR, revoked.key.id)
    assert not await claims_tenancy.claims.peek(revoked.token)
    assert await claims_tenancy.claims.redeem(revoked.token) is None
    rotated = await claims_tenancy.claims.create(OPERATOR, team="a1")
    await claims_tenancy.keys.rotate(OPERATOR, rotated.key.id)
    assert await claims_tenancy.claims.redeem(rotated.token) is None  # the sealed one is stale


async def test_a_changed_seal_opens_nothing(claims_tenancy: Tenancy, store: Store) -> None:
    made = await claims_tenancy.claims.create(OPERATOR, team="a1")
    other = await claims_tenancy.claims.create(OPERATOR, team="a1")
    async with store.write() as conn:  # move the other link's sealed bytes onto this row
        moved = (
            await conn.execute(
                select(claim_links.c.sealed).where(claim_links.c.key_id == other.key.id)
            )
        ).scalar_one()
        await conn.execute(
            update(claim_links).where(claim_links.c.key_id == made.key.id).values(sealed=moved)
        )
    assert await claims_tenancy.claims.redeem(made.token) is None


async def test_without_public_url_no_key_is_created(store: Store, clock: FakeClock) -> None:
    tenancy = Tenancy(store, clock=clock, models=MODELS)
    await tenancy.sync_orgs(DECLARED)
    with pytest.raises(BadRequest) as refused:
        await tenancy.claims.create(OPERATOR, team="a1")
    assert refused.value.code == "public_url_unset"
    assert await tenancy.keys.list(OPERATOR) == []


@pytest.mark.parametrize("lifetime", [0, -1, 30 * 86400 + 1])
async def test_a_lifetime_outside_30_days_is_refused(
    claims_tenancy: Tenancy, store: Store, lifetime: float
) -> None:
    with pytest.raises(BadRequest) as refused:
        await claims_tenancy.claims.create(OPERATOR, team="a1", expires_in=lifetime)
    assert refused.value.code == "invalid_claim_expiry"
    assert await claims_tenancy.keys.list(OPERATOR) == [] and await _rows(store) == []


async def test_the_rules_of_key_creation_apply_and_a_refusal_leaves_no_link(
    store: Store, clock: FakeClock
) -> None:
    tenancy = Tenancy(store, clock=clock, models=MODELS, public_url=BASE)
    world = await build_world(tenancy)
    before = len(await tenancy.keys.list(OPERATOR))
    with pytest.raises(Forbidden):
        await tenancy.claims.create(await world.actor("val"), team="a1")  # a viewer
    with pytest.raises(Forbidden):
        await tenancy.claims.create(await world.actor("mia"), team="a1", tags=["x"])
    assert len(await tenancy.keys.list(OPERATOR)) == before and await _rows(store) == []
    mine = await tenancy.claims.create(await world.actor("mia"), team="a1")
    assert mine.key.owner == "mia"


async def test_audit_events_name_the_link_never_the_token_or_secret(
    claims_tenancy: Tenancy, store: Store
) -> None:
    made = await claims_tenancy.claims.create(OPERATOR, team="a1")
    secret = await claims_tenancy.claims.redeem(made.token, remote="192.0.2.7")
    assert secret is not None
    async with store.read() as conn:
        events = (
            (
                await conn.execute(
                    select(audit_events).where(audit_events.c.action.like("claim_link.%"))
                )
            )
            .mappings()
            .all()
        )
    assert [e["action"] for e in events] == ["claim_link.created", "claim_link.redeemed"]
    created, redeemed = events
    assert created["actor"] == OPERATOR.name and created["target"] == f"key:{made.key.id}"
    assert redeemed["actor"] == "claim-link" and redeemed["remote"] == "192.0.2.7"
    assert redeemed["detail"]["delivered"] is True
    assert created["detail"]["link"] == redeemed["detail"]["link"]
    for event in events:
        text = str(dict(event))
        assert made.token not in text and secret not in text
