"""The key pepper across restarts of a real gateway: keys made before it keep working and
are re-hashed on their first use; a wrong pepper locks every re-hashed key out."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from pathlib import Path

import httpx
import sqlalchemy as sa

from e2e.conftest import AUTH, TEST_KEY, StartSim, add_key, model, write_config
from fairgate.auth import sha256
from fairgate.server.process import GatewayProcess
from fairgate.store import Store, tables

PEPPER = "0123456789abcdef0123456789abcdef-e2e-pepper"


async def _digests(config: Path) -> dict[str, bytes]:
    store = Store(f"sqlite:///{config.parent / 'fairgate.db'}")
    await store.connect()
    try:
        async with store.read() as conn:
            rows = await conn.execute(sa.select(tables.keys.c.prefix, tables.keys.c.secret_sha256))
            return {prefix: bytes(digest) for prefix, digest in rows}
    finally:
        await store.close()


def _status(gateway: GatewayProcess, secret: str) -> int:
    answer = httpx.get(
        f"{gateway.url}/v1/models", headers={"authorization": f"Bearer {secret}"}, timeout=10
    )
    return answer.status_code


def test_old_keys_survive_the_pepper_and_a_wrong_pepper_refuses_them(
    start_sim: StartSim, tmp_path: Path
) -> None:
    sim = start_sim("--speed", "0")
    models = [model("m", sim)]
    config = write_config(tmp_path, models)
    before = add_key(config, "t")
    with GatewayProcess(config) as gateway:
        assert _status(gateway, TEST_KEY) == 200
    digests = asyncio.run(_digests(config))
    assert (digests[TEST_KEY[:11]], digests[before[:11]]) == (sha256(TEST_KEY), sha256(before))

    (tmp_path / "pepper").write_text(PEPPER + "\n")
    write_config(tmp_path, models, auth={"key_pepper_file": "pepper"})
    after = add_key(config, "t")  # made through the same configuration: peppered
    with GatewayProcess(config) as gateway:
        for secret in (TEST_KEY, before, after):
            assert _status(gateway, secret) == 200
    digests = asyncio.run(_digests(config))
    for secret in (TEST_KEY, before, after):
        assert digests[secret[:11]] == hmac.new(PEPPER.encode(), secret.encode(), "sha256").digest()
        assert digests[secret[:11]] != hashlib.sha256(secret.encode()).digest()

    (tmp_path / "pepper").write_text(PEPPER[::-1] + "\n")
    with GatewayProcess(config) as gateway:
        for secret in (TEST_KEY, before, after):
            assert _status(gateway, secret) == 401
        assert httpx.get(f"{gateway.url}/v1/models", headers=AUTH, timeout=10).status_code == 401
