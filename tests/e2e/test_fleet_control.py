"""The control plane inside `fairgate serve` with two real `fairgate agent` processes.

A gateway with `control_plane:` and a model whose `deploy:` profile runs two replicas
of the simulated engine without GPUs; two agents on loopback, each with its node's
certificate from the suite's CA and a recorded inventory. The replicas go one to each
node and serve through the gateway with the `openai` SDK. One node dies (its agent and
its engine killed): it goes unreachable, then lost, and its replica is placed on the
other node while traffic goes on (the failures are counted). An agent presenting
another node's certificate is refused and the refusal is logged naming both. The
gateway restarted: the agents register again and the engines are adopted, same pids.
The dead node's agent back, the other node is drained while a client keeps sending:
its replicas are replaced on the first before they leave routing, and no request fails.
"""

from __future__ import annotations

import os
import signal
import time

import httpx
import openai
import pytest
from tests.e2e.conftest import TEST_KEY
from tests.e2e.fleet_helpers import (
    ADMIN,
    Fleet,
    Traffic,
    admin,
    chat,
    gateway_config,
    ready_replicas,
    until,
)

from fairgate.server.process import GatewayProcess

pytestmark = pytest.mark.slow


def test_replicas_are_placed_replaced_refused_and_adopted(fleet: Fleet) -> None:
    config = gateway_config(fleet)
    stderr = fleet.directory / "gateway.log"
    gateway = GatewayProcess(config, stderr=stderr, startup_timeout=60).start()
    try:
        fleet.agent("gpu01")
        fleet.agent("gpu02")
        placed = until(
            lambda: len(r := ready_replicas(gateway)) == 2 and r, 90, "two replicas ready"
        )
        assert sorted(r["node"] for r in placed) == ["gpu01", "gpu02"]
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=TEST_KEY, max_retries=0)
        for _ in range(6):
            assert chat(client)
        [placement] = admin(gateway, "/admin/placement")
        assert (placement["model"], placement["wanted"], placement["missing"]) == ("chat", 2, 0)

        # An agent with gpu03's certificate claiming to be gpu09 is refused, and logged.
        fleet.agent("gpu09", cert_of="gpu03")
        until(
            lambda: "a certificate for gpu03 claimed to be node 'gpu09'" in stderr.read_text(),
            30,
            "the refusal in the gateway's log",
        )
        assert "gpu09" not in {n["name"] for n in admin(gateway, "/admin/nodes")}
        refused = fleet.agents.pop("gpu09")
        refused.kill()
        refused.wait(10)

        # gpu01 dies: its agent and its engine, at once.
        [doomed] = [r for r in placed if r["node"] == "gpu01"]
        with Traffic(client) as traffic:
            time.sleep(1)
            fleet.agents["gpu01"].kill()
            fleet.agents["gpu01"].wait(10)
            os.kill(doomed["pid"], signal.SIGKILL)
            until(
                lambda: any(
                    n["name"] == "gpu01" and n["state"] == "unreachable"
                    for n in admin(gateway, "/admin/nodes")
                ),
                30,
                "gpu01 unreachable",
            )
            until(
                lambda: any(
                    n["name"] == "gpu01" and n["state"] == "lost"
                    for n in admin(gateway, "/admin/nodes")
                ),
                30,
                "gpu01 lost",
            )
            moved = until(
                lambda: (
                    len(r := ready_replicas(gateway)) == 2
                    and all(x["node"] == "gpu02" for x in r)
                    and r
                ),
                60,
                "both replicas on gpu02",
            )
            served = traffic.ok
            until(lambda: traffic.ok >= served + 5, 30, "traffic after the re-placement")
        # Only a request in flight on the dead engine may fail (the gateway retries the
        # others before their first byte on the other node).
        assert len(traffic.failed) <= 1, traffic.failed
        assert traffic.ok > 10

        # The gateway restarts: the agent registers again, nothing is relaunched.
        pids = sorted(r["pid"] for r in moved)
        gateway.stop()
        gateway = GatewayProcess(config, stderr=stderr, startup_timeout=60).start()
        again = until(
            lambda: (
                any(n["name"] == "gpu02" and n["connected"] for n in admin(gateway, "/admin/nodes"))
                and len(r := ready_replicas(gateway)) == 2
                and r
            ),
            60,
            "gpu02 registered again with its replicas",
        )
        assert sorted(r["pid"] for r in again) == pids
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=TEST_KEY, max_retries=0)
        for _ in range(4):
            assert chat(client)

        # gpu01 comes back; gpu02 is drained under traffic: make before break, each
        # replacement ready on gpu01 before a replica on gpu02 leaves routing.
        fleet.agent("gpu01")
        until(
            lambda: any(
                n["name"] == "gpu01" and n["state"] == "healthy" and n["connected"]
                for n in admin(gateway, "/admin/nodes")
            ),
            30,
            "gpu01 registered again",
        )
        with Traffic(client) as traffic:
            time.sleep(1)
            drained = httpx.post(
                gateway.admin_url + "/admin/nodes/gpu02/drain", headers=ADMIN, timeout=10
            )
            assert drained.status_code == 200, drained.text
            until(
                lambda: (
                    [r["node"] for r in admin(gateway, "/admin/replicas")] == ["gpu01", "gpu01"]
                    and len(ready_replicas(gateway)) == 2
                ),
                90,
                "both replicas moved to gpu01",
            )
            served = traffic.ok
            until(lambda: traffic.ok >= served + 5, 30, "traffic after the drain")
        assert traffic.failed == []
        assert traffic.ok > 10
    finally:
        gateway.stop()
