"""Connections are capped per listener and per client network, on a real gateway.

Each connection may hold a request body of up to ``max_body_bytes``, so the caps are
what bound the gateway's memory. One loopback address holds its cap of idle
connections; its next connection is answered 503 (an envelope an HTTP client reads,
not a reset) while another address (127.0.0.2) is still served; a connection given
back makes room again; and the admin listener keeps its own count.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from tests.e2e.conftest import AUTH, StartSim, model, write_config
from tests.e2e.robust_wire import PATIENT_HEALTH, client_from, idle_connection, until

from fairgate.server.process import GatewayProcess

pytestmark = pytest.mark.slow

PER_NETWORK = 4
TOTAL = 6


def models_status(gateway: GatewayProcess, address: str) -> tuple[int, str | None]:
    with client_from(address, **AUTH) as client:
        answer = client.get(gateway.url + "/v1/models")
    code = answer.json()["error"]["code"] if answer.status_code != 200 else None
    return answer.status_code, code


def test_connections_beyond_a_networks_cap_are_refused_while_another_network_connects(
    tmp_path: Path, start_sim: StartSim
) -> None:
    sim = start_sim("--model", "m", "--speed", "0")
    config = write_config(
        tmp_path,
        [model("m", sim)],
        health=PATIENT_HEALTH,
        limits={"max_connections": TOTAL, "max_connections_per_network": PER_NETWORK},
    )
    with GatewayProcess(config) as gateway, ExitStack() as held:
        first = [idle_connection(gateway, "127.0.0.1") for _ in range(PER_NETWORK)]
        for sock in first:
            held.callback(sock.close)

        # The next connection from 127.0.0.1: a 503 envelope the client reads.
        assert models_status(gateway, "127.0.0.1") == (503, "too_many_connections_from_network")
        # Another address is served meanwhile.
        assert models_status(gateway, "127.0.0.2") == (200, None)

        # Two more from other addresses fill the listener: then nobody new gets in.
        for address in ("127.0.0.2", "127.0.0.3"):
            held.callback(idle_connection(gateway, address).close)
        assert models_status(gateway, "127.0.0.4") == (503, "too_many_connections")
        # The admin listener counts its own connections.
        ready = httpx.get(gateway.admin_url + "/readyz", timeout=20)
        assert ready.status_code == 200

        # Each refusal is counted, and the connections held are shown.
        metrics = httpx.get(gateway.admin_url + "/metrics", timeout=20).text
        refused = 'fairgate_connections_refused_total{listener="client",reason="%s"} 1.0'
        assert refused % "max_connections_per_network" in metrics
        assert refused % "max_connections" in metrics
        assert 'fairgate_connections_open{listener="client"} 6.0' in metrics

        # A connection given back makes room for its network again.
        first[0].close()
        until(
            lambda: models_status(gateway, "127.0.0.1") == (200, None),
            10,
            "a connection from 127.0.0.1 served once one of its connections closed",
            0.2,
        )
