"""Every agent quiet at once, with real processes: nothing is torn down while the engines answer.

"The control plane cannot hear the agents" is not "the engines are down": a network
fault on the control plane's side silences every node together, and tearing down
every replica then would take the whole model away for nothing. Here both agents are
frozen (SIGSTOP: their streams stay open and say nothing, their engines run on) for
longer than `lost_after`: the nodes go unreachable and stay so, never lost, while the
engines pass the gateway's health checks; the replicas stay in routing with the same
engine processes and a client's requests go on, none failing. Thawed, the agents
speak again and their nodes are healthy, the engines still the same processes.
"""

from __future__ import annotations

import os
import signal
import time

import openai
import pytest
from tests.e2e.conftest import TEST_KEY
from tests.e2e.fleet_helpers import Fleet, Traffic, admin, gateway_config, ready_replicas, until

from fairgate.server.process import GatewayProcess

pytestmark = pytest.mark.slow

LOST_AFTER = 12.0
"""The helpers' `lost_after`: the test stays silent well past it."""


def _states(gateway: GatewayProcess) -> dict[str, str]:
    return {n["name"]: n["state"] for n in admin(gateway, "/admin/nodes")}


def _engines(gateway: GatewayProcess) -> dict[str, tuple[str, int]]:
    return {r["id"]: (r["node"], r["pid"]) for r in ready_replicas(gateway)}


def test_every_agent_silent_at_once_tears_nothing_down_while_the_engines_answer(
    fleet: Fleet,
) -> None:
    gateway = GatewayProcess(
        gateway_config(fleet), stderr=fleet.directory / "gateway.log", startup_timeout=60
    ).start()
    try:
        agents = [fleet.agent("gpu01"), fleet.agent("gpu02")]
        until(lambda: len(_engines(gateway)) == 2, 90, "two replicas ready")
        engines = _engines(gateway)
        assert sorted(node for node, _ in engines.values()) == ["gpu01", "gpu02"]
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=TEST_KEY, max_retries=0)
        with Traffic(client) as traffic:
            until(lambda: traffic.ok >= 3, 30, "traffic before the silence")
            for agent in agents:
                os.kill(agent.pid, signal.SIGSTOP)
            silent_since = time.monotonic()
            try:
                until(
                    lambda: set(_states(gateway).values()) == {"unreachable"},
                    30,
                    "both nodes unreachable",
                )
                served = traffic.ok
                while time.monotonic() - silent_since < LOST_AFTER + 6:
                    assert set(_states(gateway).values()) == {"unreachable"}, _states(gateway)
                    assert _engines(gateway) == engines  # in routing, the same processes
                    time.sleep(0.5)
                assert traffic.ok > served  # served all along by the engines it cannot hear
            finally:
                for agent in agents:
                    os.kill(agent.pid, signal.SIGCONT)
            until(lambda: set(_states(gateway).values()) == {"healthy"}, 60, "both nodes back")
            assert _engines(gateway) == engines  # nothing relaunched
        assert not traffic.failed, traffic.failed
    finally:
        fleet.stop()
        gateway.stop()
