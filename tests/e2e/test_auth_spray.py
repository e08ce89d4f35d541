"""A spray of random keys on the client listener locks out neither the operator nor valid keys.

Every client comes from 127.0.0.1, as behind a reverse proxy on the same host.
The client and admin listeners have failure limiters of their own, the master
key is compared before any failure count, a valid key is served whatever the
network's failure count, and the store lookups of unknown keys are bounded by
the lookup ceiling (read from the gateway's own ``fairgate_auth_lookups_total``).
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import httpx
import pytest
from tests.e2e.conftest import AUTH, StartSim, add_key, write_config
from tests.e2e.robust_wire import samples

from fairgate.server.process import GatewayProcess

pytestmark = pytest.mark.slow

MASTER = "a-master-key-for-the-spray-tests"
CACHE_TTL = 1.0  # seconds: how long a valid key is served from memory


def config_with(tmp_path: Path, sim_url: str, **auth: object) -> Path:
    (tmp_path / "master.key").write_text(MASTER + "\n")
    models = [{"name": "m", "engine": "vllm", "upstreams": [{"name": "r0", "url": sim_url}]}]
    return write_config(
        tmp_path,
        models,
        master_key_file="master.key",
        auth={"key_cache_ttl": f"{CACHE_TTL}s", **auth},
    )


def spray(client: httpx.Client, gateway: GatewayProcess, count: int) -> list[int]:
    """``count`` random well-formed keys on the client listener; their statuses."""
    statuses = []
    for _ in range(count):
        key = "fg-" + secrets.token_urlsafe(32)[:43]
        answer = client.get(gateway.url + "/v1/models", headers={"authorization": f"Bearer {key}"})
        statuses.append(answer.status_code)
    return statuses


def models_with(client: httpx.Client, gateway: GatewayProcess, key: str) -> int:
    answer = client.get(gateway.url + "/v1/models", headers={"authorization": f"Bearer {key}"})
    return answer.status_code


def admin_status(client: httpx.Client, gateway: GatewayProcess, credential: str) -> int:
    headers = {"authorization": f"Bearer {credential}"}
    return client.get(gateway.admin_url + "/admin/keys", headers=headers).status_code


def metric(client: httpx.Client, gateway: GatewayProcess, name: str, **labels: str) -> float:
    return samples(client.get(gateway.admin_url + "/metrics").text, name, **labels)


def test_a_loopback_spray_locks_out_neither_the_master_key_nor_valid_keys(
    tmp_path: Path, start_sim: StartSim
) -> None:
    sim = start_sim("--model", "m", "--speed", "0")
    config = config_with(tmp_path, sim.url)  # the default limits: 60 failures a minute
    unseen = add_key(config, "t")  # a valid key this gateway process has never looked up
    with GatewayProcess(config) as gateway, httpx.Client(timeout=30) as client:
        assert client.get(gateway.url + "/v1/models", headers=AUTH).status_code == 200
        statuses = spray(client, gateway, 150)
        assert statuses[:60] == [401] * 60
        assert set(statuses[60:]) == {429}  # 127.0.0.1 is over its limit
        # the operator: the master key, and the admin listener's own (untouched) limiter
        assert admin_status(client, gateway, MASTER) == 200
        assert admin_status(client, gateway, MASTER + "x") == 401
        # every caller: a key whose cache entry has expired, and one never seen
        time.sleep(CACHE_TTL * 1.5)
        assert client.get(gateway.url + "/v1/models", headers=AUTH).status_code == 200
        assert models_with(client, gateway, unseen) == 200
        looked_up = metric(client, gateway, "fairgate_auth_lookups_total", listener="client")
        refused = metric(
            client, gateway, "fairgate_auth_refusals_total", listener="client", reason="invalid"
        )
        assert refused == 150
        assert looked_up == 150 + 3  # the spray, and the valid key's three lookups


def test_the_lookup_ceiling_bounds_the_store_lookups_of_a_spray(
    tmp_path: Path, start_sim: StartSim
) -> None:
    sim = start_sim("--model", "m", "--speed", "0")
    config = config_with(tmp_path, sim.url, failures_per_minute=10, lookups_per_minute=100)
    with GatewayProcess(config) as gateway, httpx.Client(timeout=30) as client:
        assert client.get(gateway.url + "/v1/models", headers=AUTH).status_code == 200
        statuses = spray(client, gateway, 300)
        assert statuses[:10] == [401] * 10 and set(statuses[10:]) == {429}
        unknown = metric(
            client, gateway, "fairgate_auth_lookups_total", listener="client", outcome="invalid"
        )
        # a failing network looks up only while less than half of the ceiling is used; a
        # window boundary during the spray (a few seconds) frees at most a few slots more
        assert 50 <= unknown <= 55
        refused = metric(
            client,
            gateway,
            "fairgate_auth_refusals_total",
            listener="client",
            reason="network_limit",
        )
        assert refused == 300 - unknown
        # a key served before, its cache entry expired, is looked up outside the ceiling
        time.sleep(CACHE_TTL * 1.5)
        assert client.get(gateway.url + "/v1/models", headers=AUTH).status_code == 200
        assert admin_status(client, gateway, MASTER) == 200
