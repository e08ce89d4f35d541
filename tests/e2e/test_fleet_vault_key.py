"""A deployed model whose engine key is a vault secret (`deploy.key_file: vault:…`).

A gateway with `control_plane:` reads the key from the KV v2 test server
(tests/vault_server.py); one real `fairgate agent` launches the simulated engine.
The agent cannot reach the vault: the control plane sends it the key over the
mutual-TLS stream, and the agent writes it to a file of its own (mode 0600) that
the engine reads as its key file. The replica serves through the gateway, the
engine refuses a request without the key, and the key is in no process's
arguments, in no record of the state directory and in no log.
"""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import psutil
import pytest
from tests.e2e.conftest import TEST_KEY
from tests.e2e.fleet_helpers import Fleet, admin, chat, gateway_config, ready_replicas, until

from fairgate.server.process import GatewayProcess
from vault_server import VaultServer

pytestmark = pytest.mark.slow

ENGINE_KEY = "sk-engine-from-the-vault-0123456789"


@pytest.fixture
def vault() -> Iterator[VaultServer]:
    server = VaultServer().start()
    yield server
    server.stop()


def test_a_vault_engine_key_reaches_the_agent_and_nowhere_else(
    fleet: Fleet, vault: VaultServer
) -> None:
    vault.put("secret", "engines/sim", {"key": ENGINE_KEY})
    token = vault.token(paths=("secret/engines/",))
    (fleet.directory / "vault.token").write_text(token + "\n")
    config = gateway_config(
        fleet,
        unreachable_after="2s",
        model={
            "deploy": {
                "engine": "sim",
                "model": "sim",
                "gpus_per_replica": 0,
                "replicas": 1,
                "args": ["--speed", "0"],
                "key_file": "vault:secret/engines/sim#key",
            }
        },
        vault={"address": vault.url, "token_file": "vault.token", "cache_ttl": "2s"},
    )
    gw_log = fleet.directory / "gateway.err"
    with GatewayProcess(config, stderr=gw_log) as gateway:
        fleet.agent("gpu01")
        (replica,) = until(lambda: ready_replicas(gateway), 40, "the replica ready")
        with openai.OpenAI(base_url=gateway.url + "/v1", api_key=TEST_KEY) as client:
            assert chat(client)

        # The engine requires the key: without it the engine itself refuses.
        records = list((fleet.directory / "state-gpu01" / "replicas").glob("*.json"))
        assert len(records) == 1
        record = json.loads(records[0].read_text())
        port = record["spec"]["port"]
        bare = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5)
        keyed = httpx.get(
            f"http://127.0.0.1:{port}/v1/models",
            headers={"authorization": f"Bearer {ENGINE_KEY}"},
            timeout=5,
        )
        assert (bare.status_code, keyed.status_code) == (401, 200)

        # The key travels as a file of the agent's own, never in arguments or records.
        key_file = Path(record["spec"]["apiKeyRef"])
        assert key_file.parent == fleet.directory / "state-gpu01" / "replicas"
        assert key_file.read_text().strip() == ENGINE_KEY
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        assert "--api-key-file" in record["argv"] and str(key_file) in record["argv"]
        assert ENGINE_KEY not in records[0].read_text()
        assert "vault:" not in json.dumps(record)
        engine = psutil.Process(record["pid"])
        assert not any(ENGINE_KEY in arg for arg in engine.cmdline())
        assert replica["id"] in {r["id"] for r in admin(gateway, "/admin/replicas")}
    fleet.stop()
    assert not key_file.exists()  # stopped with its engine (--stop-engines): removed
    for log in (gw_log, fleet.directory / "agent-gpu01.log"):
        assert ENGINE_KEY not in log.read_text()
