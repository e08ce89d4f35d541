"""Pools follow the replicas the fleet routes: seats, C, admission and the dispatcher.

The Gateway built from a configuration with a ``deploy:`` model in pool ``p`` (fixed
capacity 16 for 2 wanted replicas, shares A 0.75 / B 0.25, admission bands, borrowers
held) and a pool ``q`` of two static upstreams; replicas join and leave routing as the
control plane makes them (``ReplicaRegistry.add``/``remove``).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from tests.e2e.conftest import write_config
from tests.tls_certs import Pki

from fairgate.app import Gateway
from fairgate.config import load_config
from fairgate.engines import EngineLoad, adapter_for
from fairgate.fairshare import FairShare
from fairgate.upstream import Breaker, Replica, ReplicaRegistry
from fairgate.upstream.pool_members import PoolMembers, Seating


def _config(directory: Path) -> Path:
    pki = Pki.make(directory)
    pki.ca.write(directory / "ca.crt")
    pki.server.write(directory, "cp")
    return write_config(
        directory,
        [
            {
                "name": "chat",
                "engine": "vllm",
                "pool": "p",
                "deploy": {"engine": "sim", "model": "sim", "gpus_per_replica": 0, "replicas": 2},
            },
            {
                "name": "fixed",
                "pool": "q",
                "upstreams": [
                    {"name": "s1", "url": "http://127.0.0.1:9/s1", "weight": 1},
                    {"name": "s3", "url": "http://127.0.0.1:9/s3", "weight": 3},
                ],
            },
        ],
        pools=[{"name": "p", "capacity": 16}, {"name": "q", "capacity": 10}],
        orgs=[
            {"name": "A", "share": 0.75, "teams": ["t"]},
            {"name": "B", "share": 0.25, "teams": ["tb"]},
        ],
        admission={"bands": [{"name": "gold", "ceiling": 1.0}]},
        control_plane={
            "listen": {"host": "127.0.0.1", "port": 0},
            "tls": {"cert_file": "cp.crt", "key_file": "cp.key", "client_ca_file": "ca.crt"},
        },
    )


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return _config(tmp_path)  # provisions its store: outside the test's event loop


@pytest.fixture
async def gateway(config: Path) -> Gateway:
    return Gateway(load_config(config))


def _replica(name: str, model: str = "chat") -> Replica:
    return Replica(
        name, model, f"http://127.0.0.1:9/{name}", 1, None, adapter_for("vllm"), Breaker()
    )


def _loaded(replica: Replica, running: float) -> Replica:
    replica.record_load(EngineLoad(running=running, waiting=0.0), fresh_for=60.0)
    return replica


async def test_seats_capacity_and_reservations_grow_and_shrink_with_the_replicas(
    gateway: Gateway,
) -> None:
    policy = gateway.fairshare
    assert policy is not None
    # nothing placed yet: no seat in p, so nobody's request is within a reservation
    assert policy.capacity("p") == 0
    assert dict(policy.reservations("p")) == {"A": 0, "B": 0}

    first, second = _replica("chat-gpu01-20000"), _replica("chat-gpu02-20001")
    gateway.registry.add(first)
    assert first.seats == 8.0  # C 16 over the 2 wanted replicas
    assert policy.capacity("p") == 8
    assert dict(policy.reservations("p")) == {"A": 6, "B": 2}
    gateway.registry.add(second)
    assert (second.seats, policy.capacity("p")) == (8.0, 16)
    assert dict(policy.reservations("p")) == {"A": 12, "B": 4}

    gateway.registry.remove("chat", first.name)
    assert policy.capacity("p") == 8
    assert dict(policy.reservations("p")) == {"A": 6, "B": 2}
    gateway.registry.remove("chat", second.name)
    assert policy.capacity("p") == 0

    # the static pool is as configured throughout: C 10, seats by weight
    assert policy.capacity("q") == 10
    assert [r.seats for r in gateway.registry.replicas("fixed")] == [2.5, 7.5]
    # and GET /admin/fairshare says where each C comes from
    assert gateway.fairshare_monitor is not None
    report = await gateway.fairshare_monitor.report()
    sources = {p["pool"]: (p["capacity"], p["capacity_source"]) for p in report["pools"]}
    assert sources == {"p": (0, "replicas"), "q": (10, "config")}


async def test_admission_and_the_dispatcher_count_the_replicas_routed_now(
    gateway: Gateway,
) -> None:
    admission, dispatcher = gateway.admission["p"], gateway.dispatcher
    assert dispatcher is not None
    assert admission.saturation() == math.inf  # no replica: held bands wait
    first = _loaded(_replica("chat-gpu01-20000"), running=0.0)
    gateway.registry.add(first)
    # a placed replica starts at its seats (8) in both: 4 in flight is half its batch
    for _ in range(4):
        gateway.registry.acquire(first, within_share=True)
    assert admission.saturation() == 0.5
    assert dispatcher.room("p") == 8 + 2 - 4  # seats, automatic engine queue, in flight

    second = _loaded(_replica("chat-gpu02-20001"), running=0.0)
    gateway.registry.add(second)
    assert admission.saturation() == 4 / 16
    assert dispatcher.room("p") == 2 * (8 + 2) - 4

    # first drains with its 4 requests running: its capacity leaves the pool with it
    lease = await admission.admit(band="gold", tenant="t")
    grant = dispatcher.grant_now("p")
    assert grant is not None
    gateway.registry.remove("chat", first.name)
    assert admission.saturation() == 1 / 8  # the granted lease, pending, over second's 8
    assert dispatcher.room("p") == 8 + 2 - 1
    # ... and what ran on it is given back in full
    for _ in range(4):
        gateway.registry.release(first, within_share=True)
    lease.release()
    grant.release()
    assert (first.in_flight, first.within_share, first.borrowing) == (0, 0, 0)
    assert (admission.pending, admission.leases) == (0, 0)
    assert admission.saturation() == 0.0
    assert dispatcher.room("p") == 8 + 2


def test_a_pool_of_static_upstreams_only_keeps_its_capacity() -> None:
    replicas = [_replica("s1", "m"), _replica("s2", "m")]
    registry = ReplicaRegistry(replicas)
    policy = FairShare({"p": 10}, {"p": {"A": 0.5, "B": 0.5}})
    members = PoolMembers(registry, {"m": "p"}, {"p": Seating(10, wanted_weight=2)}, policy)
    assert [r.seats for r in members.replicas("p")] == [5.0, 5.0]
    changes: list[str] = []
    members.on_change(changes.append)
    registry.remove("m", "s2")
    assert changes == ["p"]
    assert [r.name for r in members.replicas("p")] == ["s1"]
    assert policy.capacity("p") == 10  # not following: as configured


def test_seats_that_do_not_add_up_to_a_whole_capacity_round_down() -> None:
    registry = ReplicaRegistry([])
    policy = FairShare({"p": 10}, {"p": {"A": 1.0}})
    PoolMembers(registry, {"m": "p"}, {"p": Seating(10, wanted_weight=3, follows=True)}, policy)
    for name in ("r1", "r2", "r3"):
        registry.add(_replica(name, "m"))
        assert policy.capacity("p") == {"r1": 3, "r2": 6, "r3": 10}[name]
