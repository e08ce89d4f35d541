"""The key pepper over a real store (SQLite and PostgreSQL): keys and admin tokens stored as
HMAC-SHA-256, older ones re-hashed on their next use, a wrong pepper locking them out."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from pathlib import Path

import pytest
from sqlalchemy import select

from fairgate.auth import (
    Authenticator,
    AuthGuard,
    FailureLimiter,
    KeyCache,
    LookupCeiling,
    ModelResolver,
    sha256,
)
from fairgate.auth.pepper import KeyHasher
from fairgate.config import ConfigError, load_config
from fairgate.core.errors import Unauthorized
from fairgate.store import Store, StoreKeyDirectory
from fairgate.store.tables import admin_tokens, keys
from fairgate.tenancy import Tenancy, open_tenancy
from store.backends import FakeClock
from tenancy.conftest import MODELS
from tenancy.world import DECLARED, OPERATOR

PEPPER = b"a pepper of forty bytes, for tests only!"
OTHER = b"another pepper of forty bytes, for tests"


def _hmac(pepper: bytes, secret: str) -> bytes:
    return hmac.new(pepper, secret.encode(), hashlib.sha256).digest()


def _gateway(store: Store, clock: FakeClock, pepper: bytes | None) -> Authenticator:
    """The authentication of one freshly started gateway process (an empty cache)."""
    return Authenticator(
        StoreKeyDirectory(store),
        KeyCache(1000, 30.0, 1000, 30.0, clock),
        AuthGuard(FailureLimiter(60, clock), LookupCeiling(0, clock)),
        ModelResolver({}),
        clock,
        KeyHasher(pepper) if pepper is not None else None,
    )


async def _stored(store: Store, key_id: str) -> tuple[bytes, bytes | None]:
    async with store.read() as conn:
        row = (
            await conn.execute(
                select(keys.c.secret_sha256, keys.c.previous_sha256).where(keys.c.id == key_id)
            )
        ).one()
    return bytes(row.secret_sha256), None if row.previous_sha256 is None else bytes(
        row.previous_sha256
    )


def _bearer(secret: str) -> bytes:
    return f"Bearer {secret}".encode()


@pytest.fixture
async def plain(store: Store, clock: FakeClock) -> Tenancy:
    """The store's tenancy before any pepper was configured."""
    tenancy = Tenancy(store, clock=clock, models=MODELS)
    await tenancy.sync_orgs(DECLARED)
    return tenancy


async def test_a_key_made_before_the_pepper_works_after_it_and_is_rehashed(
    plain: Tenancy, store: Store, clock: FakeClock
) -> None:
    old = await plain.keys.create(OPERATOR, team="a1")
    assert (await _stored(store, old.key.id))[0] == sha256(old.secret)
    principal = await _gateway(store, clock, PEPPER).authenticate(_bearer(old.secret), "127.0.0.2")
    assert principal.key_id == old.key.id
    assert (await _stored(store, old.key.id))[0] == _hmac(PEPPER, old.secret)
    again = await _gateway(store, clock, PEPPER).authenticate(_bearer(old.secret), "127.0.0.2")
    assert again.key_id == old.key.id  # found by its HMAC now, in a process that never saw it


async def test_a_key_made_with_the_pepper_cannot_be_matched_by_its_plain_sha256(
    store: Store, clock: FakeClock
) -> None:
    peppered = Tenancy(store, clock=clock, models=MODELS, hasher=KeyHasher(PEPPER))
    await peppered.sync_orgs(DECLARED)
    new = await peppered.keys.create(OPERATOR, team="a1")
    current, _ = await _stored(store, new.key.id)
    assert current != sha256(new.secret)
    assert current == _hmac(PEPPER, new.secret)
    # A digest stolen elsewhere (a log, a copy of another database) finds nothing.
    assert await StoreKeyDirectory(store).find_key(sha256(new.secret), clock.now) is None
    with pytest.raises(Unauthorized):
        await _gateway(store, clock, None).authenticate(_bearer(new.secret), "127.0.0.2")
    served = await _gateway(store, clock, PEPPER).authenticate(_bearer(new.secret), "127.0.0.2")
    assert served.key_id == new.key.id


async def test_a_wrong_pepper_or_none_after_the_rehash_refuses_the_key(
    plain: Tenancy, store: Store, clock: FakeClock
) -> None:
    old = await plain.keys.create(OPERATOR, team="a1")
    await _gateway(store, clock, PEPPER).authenticate(_bearer(old.secret), "127.0.0.2")
    for pepper in (OTHER, None):
        with pytest.raises(Unauthorized):
            await _gateway(store, clock, pepper).authenticate(_bearer(old.secret), "127.0.0.3")
    assert (await _stored(store, old.key.id))[0] == _hmac(PEPPER, old.secret)  # not re-hashed


async def test_the_old_secret_of_a_rotation_in_its_grace_is_rehashed_too(
    plain: Tenancy, store: Store, clock: FakeClock
) -> None:
    old = await plain.keys.create(OPERATOR, team="a1")
    rotated = await plain.keys.rotate(OPERATOR, old.key.id, grace=3600)
    gateway = _gateway(store, clock, PEPPER)
    for secret in (old.secret, rotated.secret):
        assert (await gateway.authenticate(_bearer(secret), "127.0.0.2")).key_id == old.key.id
    assert await _stored(store, old.key.id) == (
        _hmac(PEPPER, rotated.secret),
        _hmac(PEPPER, old.secret),
    )


async def test_gateways_rehashing_the_same_key_at_once_all_serve_it(
    plain: Tenancy, store: Store, clock: FakeClock
) -> None:
    old = await plain.keys.create(OPERATOR, team="a1")
    gateways = [_gateway(store, clock, PEPPER) for _ in range(4)]
    served = await asyncio.gather(
        *(g.authenticate(_bearer(old.secret), f"127.0.0.{n + 2}") for n, g in enumerate(gateways))
    )
    assert {p.key_id for p in served} == {old.key.id}
    assert (await _stored(store, old.key.id))[0] == _hmac(PEPPER, old.secret)


async def test_admin_tokens_are_peppered_and_older_ones_rehashed_on_use(
    plain: Tenancy, store: Store, clock: FakeClock
) -> None:
    await plain.users.create(OPERATOR, "olga", org="A")
    old = await plain.admin_tokens.create(OPERATOR, user="olga")
    peppered = Tenancy(store, clock=clock, models=MODELS, hasher=KeyHasher(PEPPER))
    actor = await peppered.admin_tokens.authenticate(old.secret)
    assert actor is not None and actor.name == "user:olga"
    new = await peppered.admin_tokens.create(OPERATOR, user="olga")
    async with store.read() as conn:
        stored = dict(
            (await conn.execute(select(admin_tokens.c.id, admin_tokens.c.secret_sha256))).all()
        )
    assert bytes(stored[old.token.id]) == _hmac(PEPPER, old.secret)
    assert bytes(stored[new.token.id]) == _hmac(PEPPER, new.secret) != sha256(new.secret)
    wrong = Tenancy(store, clock=clock, models=MODELS, hasher=KeyHasher(OTHER))
    assert await wrong.admin_tokens.authenticate(old.secret) is None
    assert await plain.admin_tokens.authenticate(new.secret) is None


async def test_a_revoked_key_found_by_its_plain_digest_is_still_refused(
    plain: Tenancy, store: Store, clock: FakeClock
) -> None:
    old = await plain.keys.create(OPERATOR, team="a1")
    await plain.keys.revoke(OPERATOR, old.key.id)
    with pytest.raises(Unauthorized):
        await _gateway(store, clock, PEPPER).authenticate(_bearer(old.secret), "127.0.0.2")


def test_a_short_pepper_is_refused_at_start_naming_the_file_not_the_content(
    tmp_path: Path,
) -> None:
    pepper = tmp_path / "pepper"
    pepper.write_text("too-short-pepper-content\n")
    config = tmp_path / "gateway.yaml"
    config.write_text(
        'store: {url: "sqlite:///fairgate.db"}\n'
        "auth: {key_pepper_file: pepper}\n"
        "models: [{name: m, upstreams: [{name: u, url: 'http://127.0.0.1:9'}]}]\n"
    )

    async def start() -> None:
        async with open_tenancy(load_config(config)):
            pass

    with pytest.raises(ConfigError) as refused:
        asyncio.run(start())
    message = str(refused.value)
    assert "at least 32 bytes" in message and str(pepper) in message
    assert "too-short-pepper-content" not in message


async def test_rehashing_never_touches_what_the_change_feed_watches(
    plain: Tenancy, store: Store, clock: FakeClock
) -> None:
    old = await plain.keys.create(OPERATOR, team="a1")
    mark = clock.now  # the key's changed_at: creation
    await _gateway(store, clock, PEPPER).authenticate(_bearer(old.secret), "127.0.0.2")
    assert (await _stored(store, old.key.id))[0] == _hmac(PEPPER, old.secret)
    assert await StoreKeyDirectory(store).key_changes(mark) == []
