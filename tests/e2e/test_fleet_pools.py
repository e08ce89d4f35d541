"""A `deploy:` model in a fair-share pool, with real processes: the pool follows its replicas.

The control plane inside `fairgate serve` places two replicas of the simulated engine
(8 batch seats each, ``--max-num-seqs 8``) on two `fairgate agent` processes (the
helpers of ``fleet_helpers.py``); the model is in pool ``p`` of capacity 16 for
its two wanted replicas, organisation A with share 0.75, B with 0.25.

- (a) before any replica is ready the pool has no seat (C 0); with both ready C is
  their seats, 16, and the reservations 12 / 4 (``GET /admin/fairshare``);
- (c) both organisations saturating it with 48 clients each (the load of
  ``test_fairshare_replicas.py``, homes together): B's part of the sequences the
  two engines run is its share, 0.25 ± 0.03, of all and of the within-share ones;
- (b) gpu02 cordoned and gpu01's agent stopped (with its engine, which it reports):
  gpu01's replica leaves routing and cannot be placed elsewhere, C drops to 8
  (reservations 6 / 2) while a client's requests go on being served by gpu02, none
  failing; gpu02 uncordoned: the replica is placed there
  and C is 16 again.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import httpx
import openai
import pytest
from tests.e2e.conftest import TEST_KEY, add_key
from tests.e2e.fleet_helpers import (
    ADMIN,
    Fleet,
    Traffic,
    gateway_config,
    ready_replicas,
    until,
)
from tests.e2e.test_fairshare_replicas import HALF_LIFE, SEATS, SHARES, SIM_ARGS, _assert_shares
from tests.e2e.test_fairshare_replicas import _run as contend

from fairgate.server.process import GatewayProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def pool(gateway: GatewayProcess) -> tuple[int, dict[str, int]]:
    """Pool p's capacity and reservations as the admin API reports them."""
    answer = httpx.get(gateway.admin_url + "/admin/fairshare", headers=ADMIN, timeout=10)
    answer.raise_for_status()
    [p] = answer.json()["pools"]
    assert p["capacity_source"] == "replicas"
    return p["capacity"], {o["org"]: o["reservation"] for o in p["orgs"]}


def post(gateway: GatewayProcess, path: str) -> None:
    httpx.post(gateway.admin_url + path, headers=ADMIN, timeout=10).raise_for_status()


def routed(gateway: GatewayProcess, nodes: list[str]) -> list[dict[str, Any]] | None:
    """The ready, routed replicas when they are on ``nodes`` (in order), else None."""
    replicas = sorted(ready_replicas(gateway), key=lambda r: r["node"])
    return replicas if [r["node"] for r in replicas] == nodes else None


def test_a_pool_follows_its_placed_replicas(fleet: Fleet) -> None:
    config = gateway_config(
        fleet,
        # --model is the agent's to set: the served name
        args=[a for a in SIM_ARGS if a not in ("--model", "m")],
        # the load of test_fairshare_replicas asks for model m
        model={"pool": "p", "aliases": ["m"], "cost": {"output_per_mtok": 1000.0}},
        unreachable_after="6s",
        pools=[{"name": "p", "capacity": 2 * SEATS}],
        orgs=[
            {"name": "A", "share": SHARES["A"], "teams": ["t"]},  # TEST_KEY's team
            {"name": "B", "share": SHARES["B"], "teams": ["tb"]},
        ],
        fairshare={"half_life": HALF_LIFE},
        logging={"level": "warning"},
    )
    keys = {"A": TEST_KEY, "B": add_key(config, "tb", name="e2e")}
    gateway = GatewayProcess(
        config, stderr=fleet.directory / "gateway.log", startup_timeout=60
    ).start()
    try:
        # (a) no replica ready: no seat; both ready: their seats
        assert pool(gateway) == (0, {"A": 0, "B": 0})
        fleet.agent("gpu01")
        fleet.agent("gpu02")
        placed = until(lambda: routed(gateway, ["gpu01", "gpu02"]), 60, "a replica per node")
        assert pool(gateway) == (2 * SEATS, {"A": 12, "B": 4})

        # (c) both organisations saturating the pool: B runs its share
        run = asyncio.run(contend(gateway.url, [r["url"] for r in placed], keys, apart=False))
        assert not run.failures, run.failures[:5]
        print(
            f"\nB {run.fraction('B'):.3f} of the tokens, "
            f"{run.fraction('B', within_share=True):.3f} of the within-share ones, "
            f"{run.running():.1f} running of {2 * SEATS}"
        )
        assert run.running() >= 2 * SEATS - 1
        _assert_shares(run)

        # (b) gpu01 stops while gpu02 takes no new replica: half the seats leave (a drain
        # would keep gpu01's replica serving until a replacement is ready somewhere)
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=TEST_KEY, max_retries=0)
        with Traffic(client) as traffic:
            until(lambda: traffic.ok >= 3, 30, "traffic before the stop")
            post(gateway, "/admin/nodes/gpu02/cordon")
            fleet.agents["gpu01"].send_signal(signal.SIGTERM)  # stops its engine, says so
            until(lambda: routed(gateway, ["gpu02"]), 30, "gpu01's replica out of routing")
            until(lambda: pool(gateway)[0] == SEATS, 10, "the pool down to one replica's seats")
            assert pool(gateway) == (SEATS, {"A": 6, "B": 2})
            served = traffic.ok
            until(lambda: traffic.ok >= served + 5, 30, "traffic on the replica left")
            assert pool(gateway)[0] == SEATS  # nowhere to place the other one
        assert not traffic.failed, traffic.failed

        # gpu02 takes replicas again: the second one is placed there and brings its seats
        post(gateway, "/admin/nodes/gpu02/uncordon")
        until(lambda: routed(gateway, ["gpu02", "gpu02"]), 60, "both replicas on gpu02")
        until(lambda: pool(gateway)[0] == 2 * SEATS, 10, "the pool's seats back")
        assert pool(gateway) == (2 * SEATS, {"A": 12, "B": 4})
    finally:
        gateway.stop()
