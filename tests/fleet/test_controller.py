"""The control plane's decisions on a real store, without the network: placement spread
over nodes with its explanation, routing on `ready`, drain and cordon persisted (also
from `fairgate nodes`), a restarted controller rebuilding from the store, a replica
refused before launch placed again, a lost node's replicas placed elsewhere."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from fairgate.config import Model
from fairgate.config.fleet import ControlPlane
from fairgate.core.breaker import Breaker
from fairgate.engines import adapter_for
from fairgate.fleet.control import NodeSeen
from fairgate.fleet.controller import FleetController
from fairgate.fleet.v1 import fleet_pb2
from fairgate.inventory import Inventory
from fairgate.store import Store, upgrade
from fairgate.store import fleet as rows
from fairgate.upstream import Replica, ReplicaRegistry

SETTINGS = ControlPlane.model_validate(
    {
        "tls": {"cert_file": "/nonexistent", "key_file": "/nonexistent", "client_ca_file": "/x"},
        "heartbeat_interval": 1.0,
        "unreachable_after": 3.0,
        "lost_after": 10.0,
        "ports": {"first": 21000, "last": 21009},
    }
)
SIM = Model.model_validate(
    {
        "name": "chat",
        "deploy": {"engine": "sim", "model": "sim", "gpus_per_replica": 0, "replicas": 2},
    }
)
NO_GPU = Inventory(source="recorded")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = Store(f"sqlite:///{tmp_path}/fleet.db")
    await s.connect()
    await upgrade(s)
    try:
        yield s
    finally:
        await s.close()


def make_replica(model: Model, name: str, url: str) -> Replica:
    return Replica(name, model.name, url, 1, None, adapter_for("vllm"), Breaker())


async def started(store: Store, clock: Clock, *models: Model) -> FleetController:
    controller = FleetController(
        SETTINGS, models or (SIM,), store, ReplicaRegistry([]), make_replica, clock=clock
    )
    await controller.load()  # places nothing until unreachable_after has passed
    return controller


async def settled(controller: FleetController, clock: Clock) -> None:
    """Past the wait for the agents to register: the first placement."""
    clock.now += SETTINGS.unreachable_after
    for node in controller.nodes.values():
        node.last_seen = clock.now
    await controller.tick()


async def register(
    controller: FleetController,
    name: str,
    inventory: Inventory = NO_GPU,
    running: list[fleet_pb2.ReplicaStatus] | None = None,
    address: str = "127.0.0.1",
) -> NodeSeen:
    seen = NodeSeen(name, inventory, {}, running or [], 0.0, address=address)
    controller.service.nodes[name] = seen
    await controller.registered(seen)
    return seen


async def report(
    controller: FleetController, seen: NodeSeen, replica_id: str, state: str, pid: int = 0
) -> None:
    status = fleet_pb2.ReplicaStatus(replica_id=replica_id, state=state, pid=pid)
    await controller.received(seen, fleet_pb2.AgentMessage(status=status))


async def test_replicas_spread_join_routing_when_ready_and_survive_a_restart(store: Store) -> None:
    clock = Clock()
    controller = await started(store, clock)
    gpu01 = await register(controller, "gpu01")
    await register(controller, "gpu02")
    await settled(controller, clock)
    placed = controller.replicas_view()
    assert sorted(r["node"] for r in placed) == ["gpu01", "gpu02"]
    assert controller.registry.replicas("chat") == ()  # not before the agent says ready
    on01 = next(r["id"] for r in placed if r["node"] == "gpu01")
    await report(controller, gpu01, on01, "ready", pid=4242)
    assert [r.name for r in controller.registry.replicas("chat")] == [on01]
    desired = controller.service.desired("gpu01")
    assert [(s.replica_id, s.engine, s.served_name, s.host) for s in desired.replicas] == [
        (on01, "sim", "chat", "0.0.0.0")
    ]

    # Restarted: the stored ready replica is routed at once, and re-adopted (no new one)
    # when its agent registers again reporting it running.
    again = await started(store, clock)
    assert [r.name for r in again.registry.replicas("chat")] == [on01]
    running = fleet_pb2.ReplicaStatus(replica_id=on01, state="ready", pid=4242)
    await register(again, "gpu01", running=[running])
    await register(again, "gpu02")
    await settled(again, clock)
    assert sorted(r["id"] for r in again.replicas_view()) == sorted(r["id"] for r in placed)
    assert again.service.desired("gpu01").version > desired.version
    assert [s.replica_id for s in again.service.desired("gpu01").replicas] == [on01]


async def test_drain_moves_the_replicas_and_the_flags_survive_a_restart(
    store: Store, tmp_path: Path
) -> None:
    clock = Clock()
    controller = await started(store, clock)
    gpu01 = await register(controller, "gpu01")
    gpu02 = await register(controller, "gpu02")
    await settled(controller, clock)
    on01 = next(r["id"] for r in controller.replicas_view() if r["node"] == "gpu01")
    on02 = next(r["id"] for r in controller.replicas_view() if r["node"] == "gpu02")
    await report(controller, gpu01, on01, "ready", pid=7)
    await report(controller, gpu02, on02, "ready", pid=8)
    view = await controller.set_flags("gpu01", cordoned=True, draining=True)
    assert (view["cordoned"], view["draining"]) == (True, True)
    # Make before break: the replacement is placed on gpu02, the old one keeps serving.
    assert sorted(r.name for r in controller.registry.replicas("chat")) == sorted([on01, on02])
    [spec] = controller.service.desired("gpu01").replicas
    assert not spec.drain
    [new] = [r for r in controller.replicas_view() if r["id"] not in (on01, on02)]
    assert new["node"] == "gpu02"
    [old] = [r for r in controller.replicas_view() if r["id"] == on01]
    assert (old["replacing"], old["routed"]) == (True, True)
    [placement] = controller.placement_view()
    assert (placement["missing"], placement["replacing"]) == (0, [on01])
    await controller.tick()
    assert not controller.service.desired("gpu01").replicas[0].drain  # not while loading
    await report(controller, gpu02, new["id"], "loading", pid=9)
    await controller.tick()
    assert not controller.service.desired("gpu01").replicas[0].drain

    # The replacement is ready: the old one leaves routing, then drains and stops.
    await report(controller, gpu02, new["id"], "ready", pid=9)
    await controller.tick()
    assert sorted(r.name for r in controller.registry.replicas("chat")) == sorted([on02, new["id"]])
    [spec] = controller.service.desired("gpu01").replicas
    assert spec.drain
    await report(controller, gpu01, on01, "stopped")
    assert on01 not in {r["id"] for r in controller.replicas_view()}

    again = await started(store, clock)
    [node01] = [n for n in again.nodes_view() if n["name"] == "gpu01"]
    assert (node01["cordoned"], node01["draining"]) == (True, True)

    # `fairgate nodes uncordon` on the same store reaches the running controller.
    config = tmp_path / "gateway.yaml"
    config.write_text(
        f'store: {{url: "sqlite:///{tmp_path}/fleet.db"}}\n'
        'models: [{name: m, upstreams: [{name: u, url: "http://127.0.0.1:9"}]}]\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "fairgate", "nodes", "uncordon", "gpu01", "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    await again.tick()
    [node01] = [n for n in again.nodes_view() if n["name"] == "gpu01"]
    assert (node01["cordoned"], node01["draining"]) == (False, False)
    listed = subprocess.run(
        [sys.executable, "-m", "fairgate", "nodes", "cordon", "gpu77", "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert listed.returncode == 1 and "no node 'gpu77' has registered" in listed.stderr


def _gpus(domains: list[int]) -> Inventory:
    return Inventory.model_validate(
        {
            "source": "recorded",
            "gpus": [
                {
                    "index": i,
                    "uuid": f"GPU-{i}",
                    "name": "H100",
                    "memory_total_mib": 81559,
                    "memory_used_mib": 0,
                    "memory_free_mib": 81559,
                    "nvlink_domain": d,
                }
                for i, d in enumerate(domains)
            ],
        }
    )


async def test_a_replica_that_fits_nowhere_is_explained_per_node(store: Store) -> None:
    tp4 = Model.model_validate(
        {
            "name": "big",
            "deploy": {
                "engine": "vllm",
                "model": "meta-llama/Llama-3.3-70B-Instruct",
                "gpus_per_replica": 4,
                "tensor_parallel_size": 4,
            },
        }
    )
    clock = Clock()
    controller = await started(store, clock, tp4)
    await register(controller, "gpu03", _gpus([0, 0, 1, 1]))
    await register(controller, "gpu04", _gpus([0, 0]))
    await controller.set_flags("gpu04", cordoned=True)
    await settled(controller, clock)
    [placement] = controller.placement_view()
    assert placement["missing"] == 1
    assert placement["reason"] == (
        "gpu03: needs 4 free GPUs in one NVLink domain: 4 free across 2 domains, at most 2 "
        "in one; gpu04: is cordoned"
    )


async def test_a_replica_refused_before_launch_is_placed_again_on_another_port(
    store: Store,
) -> None:
    one = Model.model_validate(
        {"name": "chat", "deploy": {"engine": "sim", "model": "sim", "gpus_per_replica": 0}}
    )
    clock = Clock()
    controller = await started(store, clock, one)
    gpu01 = await register(controller, "gpu01")
    await settled(controller, clock)
    [first] = controller.replicas_view()
    refused = fleet_pb2.ReplicaStatus(replica_id=first["id"], state="failed", tail=["port in use"])
    await controller.received(gpu01, fleet_pb2.AgentMessage(status=refused))
    await controller.tick()
    [placement] = controller.placement_view()
    assert placement["missing"] == 1
    assert "gpu01: refused a replica before launch" in placement["reason"]
    clock.now += 31
    controller.nodes["gpu01"].last_seen = clock.now
    await controller.tick()
    [second] = controller.replicas_view()
    assert second["node"] == "gpu01" and second["port"] != first["port"]


async def test_a_lost_node_s_replicas_go_elsewhere_but_not_while_its_engines_answer(
    store: Store,
) -> None:
    clock = Clock()
    controller = await started(store, clock)
    gpu01 = await register(controller, "gpu01")
    await register(controller, "gpu02")
    await settled(controller, clock)
    on01 = next(r["id"] for r in controller.replicas_view() if r["node"] == "gpu01")
    await report(controller, gpu01, on01, "ready", pid=9)
    replica = controller.registry.replicas("chat")[0]
    replica.set_health(True)
    controller.disconnected(gpu01)
    clock.now += 60
    controller.nodes["gpu02"].last_seen = clock.now  # gpu02 keeps talking
    await controller.tick()
    assert controller.nodes_view()[0]["state"] == "unreachable"  # silent, engines answer
    assert [r.name for r in controller.registry.replicas("chat")] == [on01]
    replica.set_health(False)
    await controller.tick()
    assert controller.nodes_view()[0]["state"] == "lost"
    assert controller.registry.replicas("chat") == ()
    assert [r["node"] for r in controller.replicas_view()] == ["gpu02", "gpu02"]


async def test_a_node_whose_slurm_allocation_ends_soon_is_drained_and_explained(
    store: Store,
) -> None:
    clock = Clock()
    controller = await started(store, clock)
    ending = int(time.time()) + 60  # within the 10 minutes' margin
    seen = NodeSeen("gpu01", NO_GPU, {}, [], 0.0, address="127.0.0.1", allocation_ends_at=ending)
    controller.service.nodes["gpu01"] = seen
    await controller.registered(seen)
    await register(controller, "gpu02")
    await settled(controller, clock)
    assert [r["node"] for r in controller.replicas_view()] == ["gpu02", "gpu02"]
    [node01] = [n for n in controller.nodes_view() if n["name"] == "gpu01"]
    assert node01["replicas"] == []


async def test_a_stop_its_agent_acknowledges_places_the_replica_elsewhere_at_once(
    store: Store,
) -> None:
    """An agent stopping its engines as it shuts down (--stop-engines) reports each one
    stopped: that acknowledgement is the fence, so the replica is placed on another node
    at once, without the node being lost first, and not on its own node until its agent
    registers again."""
    clock = Clock()
    controller = await started(store, clock)
    gpu01 = await register(controller, "gpu01")
    await register(controller, "gpu02")
    await settled(controller, clock)
    on01 = next(r["id"] for r in controller.replicas_view() if r["node"] == "gpu01")
    await report(controller, gpu01, on01, "ready", pid=11)
    await report(controller, gpu01, on01, "stopped")
    await controller.tick()
    assert on01 not in {r["id"] for r in controller.replicas_view()}
    assert [r["node"] for r in controller.replicas_view()] == ["gpu02", "gpu02"]
    assert controller.registry.replicas("chat") == ()
    assert [n["state"] for n in controller.nodes_view()] == ["healthy", "healthy"]
    async with store.read() as conn:
        stored = await rows.list_replicas(conn)
    assert [r.node for r in stored] == ["gpu02", "gpu02"]

    # Its agent comes back: the node takes replicas again (here: none is missing).
    await register(controller, "gpu01")
    assert not controller.nodes["gpu01"].stopping


async def test_without_an_acknowledged_stop_a_silent_node_keeps_its_replica_until_lost(
    store: Store,
) -> None:
    """The other rule stays: an agent that goes silent without reporting a stop keeps its
    replica placed on its node until the node is lost."""
    clock = Clock()
    controller = await started(store, clock)
    gpu01 = await register(controller, "gpu01")
    await register(controller, "gpu02")
    await settled(controller, clock)
    on01 = next(r["id"] for r in controller.replicas_view() if r["node"] == "gpu01")
    await report(controller, gpu01, on01, "ready", pid=11)
    controller.disconnected(gpu01)
    clock.now += SETTINGS.unreachable_after + 1
    controller.nodes["gpu02"].last_seen = clock.now
    await controller.tick()
    assert controller.nodes["gpu01"].state == "unreachable"
    assert on01 in {r["id"] for r in controller.replicas_view()}


async def test_a_drained_replica_keeps_serving_while_no_node_fits_its_replacement(
    store: Store,
) -> None:
    clock = Clock()
    controller = await started(store, clock)
    gpu01 = await register(controller, "gpu01")
    await settled(controller, clock)
    ids = [r["id"] for r in controller.replicas_view()]
    for replica_id in ids:
        await report(controller, gpu01, replica_id, "ready", pid=7)
    await controller.set_flags("gpu01", cordoned=True, draining=True)
    clock.now += SETTINGS.replacement_deadline + 1
    controller.nodes["gpu01"].last_seen = clock.now
    await controller.tick()
    assert sorted(r.name for r in controller.registry.replicas("chat")) == sorted(ids)
    assert not any(spec.drain for spec in controller.service.desired("gpu01").replicas)
    [placement] = controller.placement_view()
    assert placement["missing"] == 2
    assert placement["reason"] == (
        "2 replica(s) on draining nodes keep serving until a replacement fits: gpu01: is draining"
    )


async def test_a_replacement_not_ready_by_the_deadline_drains_the_old_replica_anyway(
    store: Store,
) -> None:
    one = Model.model_validate(
        {"name": "chat", "deploy": {"engine": "sim", "model": "sim", "gpus_per_replica": 0}}
    )
    clock = Clock()
    controller = await started(store, clock, one)
    gpu01 = await register(controller, "gpu01")
    await settled(controller, clock)
    [old] = controller.replicas_view()
    await report(controller, gpu01, old["id"], "ready", pid=7)
    gpu02 = await register(controller, "gpu02")
    await controller.set_flags("gpu01", cordoned=True, draining=True)
    [new] = [r for r in controller.replicas_view() if r["id"] != old["id"]]
    await report(controller, gpu02, new["id"], "crash_loop", pid=0)
    clock.now += SETTINGS.replacement_deadline / 2
    for node in controller.nodes.values():
        node.last_seen = clock.now
    await controller.tick()
    assert [r.name for r in controller.registry.replicas("chat")] == [old["id"]]
    clock.now += SETTINGS.replacement_deadline / 2 + 1
    for node in controller.nodes.values():
        node.last_seen = clock.now
    await controller.tick()
    assert controller.registry.replicas("chat") == ()
    [spec] = controller.service.desired("gpu01").replicas
    assert spec.drain


async def test_ports_are_unique_per_machine_not_across_the_fleet(store: Store) -> None:
    clock = Clock()
    three = Model.model_validate(
        {
            "name": "chat",
            "deploy": {"engine": "sim", "model": "sim", "gpus_per_replica": 0, "replicas": 3},
        }
    )
    controller = await started(store, clock, three)
    await register(controller, "gpu01", address="10.0.0.1")
    await register(controller, "gpu02", address="10.0.0.2")
    await register(controller, "gpu03", address="10.0.0.2")
    await settled(controller, clock)
    ports = {r["node"]: r["port"] for r in controller.replicas_view()}
    assert ports["gpu01"] == SETTINGS.ports.first
    assert ports["gpu02"] != ports["gpu03"]  # one machine: its ports are shared
    assert SETTINGS.ports.first in (ports["gpu02"], ports["gpu03"])


async def test_a_replica_that_fitted_nowhere_is_placed_on_a_node_that_joins_later(
    store: Store,
) -> None:
    one_gpu = Model.model_validate(
        {
            "name": "big",
            "deploy": {"engine": "vllm", "model": "m", "gpus_per_replica": 1, "replicas": 2},
        }
    )
    clock = Clock()
    controller = await started(store, clock, one_gpu)
    await register(controller, "gpu01", _gpus([0]))
    await settled(controller, clock)
    [placement] = controller.placement_view()
    assert placement["missing"] == 1
    await register(controller, "gpu02", _gpus([0]))
    [placement] = controller.placement_view()
    assert placement["missing"] == 0
    assert sorted(r["node"] for r in controller.replicas_view()) == ["gpu01", "gpu02"]


async def test_running_replicas_are_not_moved_onto_a_node_that_joins_later(store: Store) -> None:
    clock = Clock()
    controller = await started(store, clock)
    await register(controller, "gpu01")
    await settled(controller, clock)
    before = sorted(r["id"] for r in controller.replicas_view())
    assert [r["node"] for r in controller.replicas_view()] == ["gpu01", "gpu01"]
    await register(controller, "gpu02")
    await controller.tick()
    assert sorted(r["id"] for r in controller.replicas_view()) == before


async def test_replicas_of_names_with_dashes_get_ids_of_their_own(store: Store) -> None:
    # "{model}-{node}-{port}" is the same for model a-b on node c and model a on node b-c
    # at the same port: the second replica took the first one's id
    def deployed(name: str, zone: str) -> Model:
        deploy = {"engine": "sim", "model": "sim", "gpus_per_replica": 0, "replicas": 1}
        return Model.model_validate(
            {"name": name, "deploy": {**deploy, "node_labels": {"zone": zone}}}
        )

    clock = Clock()
    controller = await started(store, clock, deployed("a-b", "x"), deployed("a", "y"))
    for node, zone, address in (("c", "x", "10.0.0.1"), ("b-c", "y", "10.0.0.2")):
        seen = NodeSeen(node, NO_GPU, {"zone": zone}, [], 0.0, address=address)
        controller.service.nodes[node] = seen
        await controller.registered(seen)
    await settled(controller, clock)
    placed = {(r["model"], r["node"]): r["id"] for r in controller.replicas_view()}
    assert set(placed) == {("a-b", "c"), ("a", "b-c")}
    assert len(set(placed.values())) == 2
    async with store.read() as conn:
        stored = {(r.model, r.node): r.id for r in await rows.list_replicas(conn)}
    assert stored == placed
    # and both survive a restart of the control plane as they are
    again = await started(store, clock, deployed("a-b", "x"), deployed("a", "y"))
    assert {(r["model"], r["node"]): r["id"] for r in again.replicas_view()} == placed
