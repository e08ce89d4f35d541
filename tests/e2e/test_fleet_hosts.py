"""The fleet across hosts: two nodes in network namespaces of their own, each its own
machine on the network (its own address, its own loopback and ports), joined to the
gateway's host by a veth pair.

The gateway with its control plane runs on the test's host; each node's `fairgate agent`
and the engines it launches run inside its namespace and dial the control plane at the
host's end of their link. The control plane gets one port to hand out, so both replicas
can run only because ports are counted per machine: both listen on that port, each on
its own host, and the gateway reaches each at the address its agent's stream came from.
Traffic through the `openai` SDK is served by both, and a node's engine is out of reach
from the other node (separate machines, not two sockets on one loopback).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import openai
import pytest
from tests.e2e.conftest import TEST_KEY
from tests.e2e.fleet_helpers import Fleet, admin, gateway_config, ready_replicas, until
from tests.redis_server import free_port

from fairgate.server.process import GatewayProcess

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Host:
    """A network namespace joined to this host: ``address`` inside, ``gateway`` this
    host's end of the link."""

    netns: str
    address: str
    gateway: str

    def run(self, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ip", "netns", "exec", self.netns, *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


_GET = "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)"


def _served(address: str, port: int) -> int:
    """Chat requests the engine at ``address`` has finished (its own count)."""
    stats = httpx.get(f"http://{address}:{port}/sim/stats", timeout=5).json()
    return int(stats["finished"])


def _ip(*argv: str) -> None:
    done = subprocess.run(["ip", *argv], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"ip {' '.join(argv)}: {done.stderr.strip()}"


@pytest.fixture
def hosts() -> Iterator[list[Host]]:
    """Two hosts, 10.X.1.2 and 10.X.2.2 (X random per test), each on a link of its own."""
    tag, subnet = f"{os.getpid() % 100000}{random.randrange(100)}", random.randrange(100, 250)
    made: list[Host] = []
    try:
        for i in (1, 2):
            netns, outside, inside = f"fg{tag}h{i}", f"fg{tag}o{i}", f"fg{tag}i{i}"
            _ip("netns", "add", netns)
            made.append(Host(netns, f"10.{subnet}.{i}.2", f"10.{subnet}.{i}.1"))
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            _ip("link", "set", inside, "netns", netns)
            _ip("addr", "add", f"10.{subnet}.{i}.1/24", "dev", outside)
            _ip("link", "set", outside, "up")
            for argv in (
                ("addr", "add", f"10.{subnet}.{i}.2/24", "dev", inside),
                ("link", "set", inside, "up"),
                ("link", "set", "lo", "up"),
            ):
                _ip("-n", netns, *argv)
        yield made
    finally:
        for host in made:  # the veth pair goes with its namespace
            subprocess.run(["ip", "netns", "del", host.netns], capture_output=True, check=False)


def test_replicas_run_on_two_hosts_on_one_port_and_serve(fleet: Fleet, hosts: list[Host]) -> None:
    # the control plane's certificate names the host's end of each link, where agents dial
    server = fleet.pki.ca.issue(
        "gateway", server=True, ip_addresses=tuple(h.gateway for h in hosts)
    )
    server.write(fleet.directory, "cp")
    engine_port = free_port()
    config = gateway_config(
        fleet,
        settings={
            "listen": {"host": "0.0.0.0", "port": fleet.port},
            "ports": {"first": engine_port, "last": engine_port},  # one port for the fleet
        },
    )
    gateway = GatewayProcess(config, stderr=fleet.directory / "gateway.log", startup_timeout=60)
    gateway.start()
    try:
        for i, host in enumerate(hosts, 1):
            fleet.agent(
                f"gpu0{i}",
                prefix=("ip", "netns", "exec", host.netns),
                addresses=[f"{host.gateway}:{fleet.port}"],
            )
        placed = until(
            lambda: len(r := ready_replicas(gateway)) == 2 and r, 90, "two replicas ready"
        )
        nodes = {n["name"]: n for n in admin(gateway, "/admin/nodes")}
        assert {n: nodes[n]["address"] for n in ("gpu01", "gpu02")} == {
            "gpu01": hosts[0].address,
            "gpu02": hosts[1].address,
        }
        urls = sorted(r["url"] for r in placed)
        assert urls == sorted(f"http://{h.address}:{engine_port}" for h in hosts), urls

        # each engine runs on its own host: on that host's loopback, not on this one's
        local = f"http://127.0.0.1:{engine_port}/sim/stats"
        for host in hosts:
            assert host.run(sys.executable, "-c", _GET, local).returncode == 0
        with pytest.raises(httpx.ConnectError):
            httpx.get(local, timeout=2)

        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=TEST_KEY, max_retries=0)
        before = [_served(h.address, engine_port) for h in hosts]
        sent = 0

        def both_served() -> bool:
            # sessions of their own, so not all at home on one replica; until both have
            # served (a replica just routed ranks low until its first metrics are read)
            nonlocal sent
            for _ in range(10):
                answer = client.chat.completions.create(
                    model="chat",
                    messages=[{"role": "user", "content": "hello"}],
                    max_tokens=4,
                    extra_headers={"x-session-id": f"session-{sent}"},
                )
                assert answer.choices[0].message.content
                sent += 1
            now = [_served(h.address, engine_port) for h in hosts]
            return all(a > b for a, b in zip(now, before, strict=True))

        until(both_served, 60, "requests served by the engines of both hosts")
        assert sum(_served(h.address, engine_port) for h in hosts) - sum(before) == sent
    finally:
        fleet.stop()
        gateway.stop()
