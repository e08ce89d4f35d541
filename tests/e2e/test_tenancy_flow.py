"""Keys end to end: the operator CLI, the gateway, the official SDK, the store behind them.

- a key made with ``fairgate keys create`` works; revoked with ``fairgate keys revoke``
  it gets the 401 of an unknown key within the key cache's TTL;
- a key's model list hides the other models (404 like an unknown model, absent from
  ``GET /v1/models``);
- a spray of random keys from one network is stopped with 429 before the store,
  while a valid key already cached keeps working from that same network;
- a store that stops answering gives 503, never 401, and a cached key keeps working;
- the admin API on the admin listener takes the master key from its file.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx
import openai
import pytest
from tests.e2e.conftest import model, write_config

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess

pytestmark = pytest.mark.slow

CHAT = "/v1/chat/completions"


def cli(config: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "fairgate", *args, "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def new_key(config: Path, *extra: str) -> tuple[str, str]:
    """(id, secret) of a key made with the operator CLI in team t."""
    (made,) = json.loads(cli(config, "keys", "create", "--team", "t", "--json", *extra))
    return made["id"], made["secret"]


def chat(gateway: GatewayProcess, key: str, model_name: str = "a") -> httpx.Response:
    return httpx.post(
        gateway.url + CHAT,
        json={
            "model": model_name,
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 2,
        },
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )


@pytest.fixture(scope="module")
def sims() -> Iterator[tuple[SimProcess, SimProcess]]:
    with (
        SimProcess("--model", "a", "--speed", "0") as a,
        SimProcess("--model", "b", "--speed", "0") as b,
    ):
        yield a, b


MASTER = "a-master-key-for-this-test-only"


@dataclass(frozen=True, slots=True)
class Shared:
    """One gateway for the cases that leave nothing behind for the others: models a
    (alias alpha) and b (alias beta), a key cache TTL of a second, the master key's file."""

    config: Path
    gateway: GatewayProcess


@pytest.fixture(scope="module")
def shared(
    tmp_path_factory: pytest.TempPathFactory, sims: tuple[SimProcess, SimProcess]
) -> Iterator[Shared]:
    directory = tmp_path_factory.mktemp("shared")
    (directory / "master.key").write_text(MASTER + "\n")
    models = [model("a", sims[0], aliases=["alpha"]), model("b", sims[1], aliases=["beta"])]
    config = write_config(
        directory, models, auth={"key_cache_ttl": "1s"}, master_key_file="master.key"
    )
    with GatewayProcess(config) as gateway:
        yield Shared(config, gateway)


def test_cli_key_works_and_is_refused_within_the_ttl_after_revoke(shared: Shared) -> None:
    config, gateway = shared.config, shared.gateway
    key_id, secret = new_key(config)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=secret, max_retries=0)
    answer = client.chat.completions.create(
        model="a", messages=[{"role": "user", "content": "hi"}], max_tokens=3
    )
    assert answer.usage is not None and answer.usage.completion_tokens == 3

    unknown = chat(gateway, "fg-" + secrets.token_urlsafe(32)[:43])
    assert unknown.status_code == 401

    cli(config, "keys", "revoke", key_id)
    revoked_at = time.monotonic()
    while (answer := chat(gateway, secret)).status_code == 200:
        assert time.monotonic() - revoked_at < 10, "still served long after the cache TTL"
        time.sleep(0.2)
    assert answer.status_code == 401
    # Revoked and unknown are indistinguishable to the caller.
    assert answer.content == unknown.content
    with pytest.raises(openai.AuthenticationError):
        client.models.list()


def test_a_keys_model_list_hides_every_other_model(shared: Shared) -> None:
    config, gateway = shared.config, shared.gateway
    _, only_a = new_key(config, "--models", "alpha")  # named by its alias: means model a
    _, both = new_key(config)
    listed = httpx.get(
        gateway.url + "/v1/models", timeout=30, headers={"authorization": f"Bearer {only_a}"}
    ).json()
    assert {m["id"] for m in listed["data"]} == {"a", "alpha"}
    assert chat(gateway, only_a, "a").status_code == 200
    assert chat(gateway, only_a, "alpha").status_code == 200
    hidden = chat(gateway, only_a, "b")
    unknown = chat(gateway, only_a, "zzz")
    assert hidden.status_code == unknown.status_code == 404
    assert hidden.json()["error"]["code"] == unknown.json()["error"]["code"]
    assert chat(gateway, only_a, "beta").status_code == 404
    assert chat(gateway, both, "beta").status_code == 200


def test_a_key_spray_is_stopped_before_the_store_and_spares_a_cached_key(
    tmp_path: Path, sims: tuple[SimProcess, SimProcess]
) -> None:
    config = write_config(tmp_path, [model("a", sims[0])], auth={"failures_per_minute": 30})
    _, secret = new_key(config)
    with GatewayProcess(config) as gateway, httpx.Client(timeout=30) as client:
        assert chat(gateway, secret).status_code == 200  # now cached
        statuses = []
        for index in range(300):
            spray = "fg-" + secrets.token_urlsafe(32)[:43]
            # A forged X-Forwarded-For per request changes nothing: the address is the
            # connection's, so the limiter still counts one network.
            forged = f"203.0.113.{index % 250}, 198.51.100.{index % 250}"
            answer = client.get(
                gateway.url + "/v1/models",
                headers={"authorization": f"Bearer {spray}", "x-forwarded-for": forged},
            )
            statuses.append(answer.status_code)
        assert statuses[:30] == [401] * 30
        assert set(statuses[31:]) == {429}
        assert int(answer.headers["retry-after"]) >= 1
        # The valid key from the very same address is still served, from the cache.
        assert chat(gateway, secret).status_code == 200


def test_a_store_outage_is_503_never_401_and_cached_keys_keep_working(
    tmp_path: Path, sims: tuple[SimProcess, SimProcess], pg_url: str, pg_database: str
) -> None:
    (tmp_path / "pg.url").write_text(pg_database)
    config = write_config(tmp_path, [model("a", sims[0])], store={"url_file": "pg.url"})
    _, used = new_key(config)
    _, unseen = new_key(config)
    name = urllib.parse.urlsplit(pg_database).path.lstrip("/")

    async def cut(allow: bool) -> None:
        conn = await asyncpg.connect(pg_url)
        try:
            await conn.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS {str(allow).lower()}")
            if not allow:
                await conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    f"WHERE datname = '{name}'"
                )
        finally:
            await conn.close()

    with GatewayProcess(config) as gateway:
        assert chat(gateway, used).status_code == 200
        asyncio.run(cut(allow=False))
        try:
            down = chat(gateway, unseen)
            assert down.status_code == 503, down.text
            assert down.json()["error"]["type"] == "service_unavailable"
            assert chat(gateway, unseen).status_code == 503  # not cached as a miss
            assert chat(gateway, used).status_code == 200  # the cache answers
        finally:
            asyncio.run(cut(allow=True))
        deadline = time.monotonic() + 20
        while (answer := chat(gateway, unseen)).status_code == 503:
            assert time.monotonic() < deadline, "the store never came back"
            time.sleep(0.5)
        assert answer.status_code == 200


def test_the_admin_api_takes_the_master_key_from_its_file(shared: Shared) -> None:
    gateway = shared.gateway
    me = httpx.get(
        gateway.admin_url + "/admin/whoami",
        timeout=30,
        headers={"authorization": f"Bearer {MASTER}"},
    )
    assert me.status_code == 200
    wrong = httpx.get(
        gateway.admin_url + "/admin/whoami",
        timeout=30,
        headers={"authorization": "Bearer not-the-master-key"},
    )
    assert wrong.status_code == 401
    assert "not-the-master-key" not in wrong.text
    assert httpx.get(gateway.admin_url + "/admin/openapi.json", timeout=30).status_code == 401
    spec = httpx.get(
        gateway.admin_url + "/admin/openapi.json",
        timeout=30,
        headers={"authorization": f"Bearer {MASTER}"},
    )
    assert spec.status_code == 200 and "/admin/keys" in str(spec.json()["paths"])
