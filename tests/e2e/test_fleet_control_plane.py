"""`fairgate control-plane` as its own process, a standby on the same store, and two
gateways without a control plane routing to the replicas it placed.

One SQLite store; a `fairgate control-plane` (A) places the two replicas of a `deploy:`
model of simulated engines on two real `fairgate agent` processes, which are given A's
address and B's. Two `fairgate serve` gateways whose configuration has the model but no
`control_plane:` serve it through the `openai` SDK: they learn the replicas from the
store. A standby control plane (B) starts and lists nothing: it does not hold the lease.
A is SIGKILLed while both gateways carry traffic: the engines keep serving through both,
B takes the lease once A's expires, the agents dial it, and it shows the same replicas
with the same engine pids and places nothing new.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import openai
import pytest
from tests.e2e.conftest import TEST_KEY
from tests.e2e.fleet_helpers import (
    Fleet,
    Traffic,
    admin,
    chat,
    gateway_config,
    ready_replicas,
    until,
)
from tests.redis_server import free_port, port_block

from fairgate.server.process import ControlPlaneProcess, GatewayProcess

pytestmark = pytest.mark.slow


def served(client: openai.OpenAI) -> bool:
    try:
        return bool(chat(client))
    except openai.APIError:
        return False


def test_gateways_route_to_a_separate_control_plane_and_a_standby_takes_over(
    fleet: Fleet,
) -> None:
    standby_port = free_port()
    fleet.addresses = [f"127.0.0.1:{fleet.port}", f"127.0.0.1:{standby_port}"]
    first = port_block(50)
    shared: dict[str, Any] = {"ports": {"first": first, "last": first + 49}, "lease_ttl": "3s"}
    config_a = gateway_config(fleet, name="cp-a.yaml", journal="journal-a", settings=shared)
    config_b = gateway_config(
        fleet, name="cp-b.yaml", port=standby_port, journal="journal-b", settings=shared
    )
    gateway_configs = [
        gateway_config(fleet, name=f"gw{i}.yaml", control_plane=False, journal=f"journal-{i}")
        for i in (1, 2)
    ]
    log: Path = fleet.directory / "processes.log"
    processes: list[ControlPlaneProcess | GatewayProcess] = []
    try:
        active = ControlPlaneProcess(config_a, stderr=log, startup_timeout=60).start()
        processes.append(active)
        assert active.agents == f"127.0.0.1:{fleet.port}"
        fleet.agent("gpu01")
        fleet.agent("gpu02")
        gateways = [
            GatewayProcess(c, stderr=log, startup_timeout=60).start() for c in gateway_configs
        ]
        processes.extend(gateways)
        placed = until(
            lambda: len(r := ready_replicas(active)) == 2 and r, 90, "two replicas ready"
        )
        engines = {r["id"]: r["pid"] for r in placed}
        clients = [
            openai.OpenAI(base_url=g.url + "/v1", api_key=TEST_KEY, max_retries=0) for g in gateways
        ]
        for client in clients:  # each gateway learns the replicas from the store
            until(lambda c=client: served(c), 30, "the gateway serving the deploy: model")
            for _ in range(4):
                assert chat(client)

        standby = ControlPlaneProcess(config_b, stderr=log, startup_timeout=60).start()
        processes.append(standby)
        assert admin(standby, "/admin/replicas") == []  # no lease: it places nothing
        assert admin(standby, "/admin/nodes") == []  # and the agents stay with A
        [waiting] = admin(standby, "/admin/placement")
        assert "on standby" in waiting["reason"]

        with Traffic(clients[0]) as one, Traffic(clients[1]) as two:
            until(lambda: one.ok > 3 and two.ok > 3, 30, "traffic through both gateways")
            os.kill(active.pid or 0, signal.SIGKILL)  # the control plane crashes
            active.stop()
            before = (one.ok, two.ok)
            until(
                lambda: one.ok >= before[0] + 5 and two.ok >= before[1] + 5,
                30,
                "both gateways serving without a control plane",
            )
            nodes = until(
                lambda: (
                    len(n := admin(standby, "/admin/nodes")) == 2
                    and all(x["connected"] for x in n)
                    and n
                ),
                60,
                "the agents registered with the standby",
            )
            assert sorted(n["name"] for n in nodes) == ["gpu01", "gpu02"]
            [placement] = until(
                lambda: (p := admin(standby, "/admin/placement"))[0]["missing"] == 0 and p,
                60,
                "the standby placing (after waiting for the agents)",
            )
            again = {r["id"]: r["pid"] for r in placement["replicas"]}
            assert again == engines  # the same replicas and engines: nothing relaunched
            assert all(r["state"] == "ready" for r in placement["replicas"])
            served_now = (one.ok, two.ok)
            until(
                lambda: one.ok >= served_now[0] + 5 and two.ok >= served_now[1] + 5,
                30,
                "both gateways serving after the takeover",
            )
        assert one.failed == [] and two.failed == []
        assert "holds the lease" in log.read_text()
    finally:
        for process in reversed(processes):
            process.stop()
