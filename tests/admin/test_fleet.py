"""The fleet on the admin API: who may read it, who may cordon and drain, and the answers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from prometheus_client import CollectorRegistry

from admin.conftest import MASTER_KEY, MODELS, PUBLIC_URL, admin_guard, make_client
from fairgate.admin import build_admin_app
from fairgate.auth.secrets import sha256
from fairgate.config import Model
from fairgate.config.fleet import ControlPlane
from fairgate.core.breaker import Breaker
from fairgate.engines import adapter_for
from fairgate.fleet.control import NodeSeen
from fairgate.fleet.controller import FleetController
from fairgate.fleet.v1 import fleet_pb2
from fairgate.inventory import Inventory
from fairgate.store import Store
from fairgate.tenancy import Tenancy
from fairgate.upstream import Replica, ReplicaRegistry
from store.backends import FakeClock
from tenancy.world import OPERATOR, World, build_world

SETTINGS = ControlPlane.model_validate(
    {"tls": {"cert_file": "/nonexistent", "key_file": "/nonexistent", "client_ca_file": "/x"}}
)
CHAT = Model.model_validate(
    {"name": "chat", "deploy": {"engine": "sim", "model": "sim", "gpus_per_replica": 0}}
)


@dataclass
class FleetApi:
    client: httpx.AsyncClient
    world: World
    controller: FleetController

    def headers(self, user: str) -> dict[str, str]:
        if user == "master":
            return {"authorization": f"Bearer {MASTER_KEY}"}
        return {"authorization": f"Bearer {self.world.tokens[user]}"}


def _replica(model: Model, name: str, url: str) -> Replica:
    return Replica(name, model.name, url, 1, None, adapter_for("vllm"), Breaker())


@pytest.fixture
async def fleet_api(store: Store) -> AsyncIterator[FleetApi]:
    clock = FakeClock()
    tenancy = Tenancy(store, clock=clock, models=MODELS, public_url=PUBLIC_URL)
    world = await build_world(tenancy)
    controller = FleetController(SETTINGS, [CHAT], store, ReplicaRegistry([]), _replica)
    await controller.load()
    seen = NodeSeen("gpu01", Inventory(source="recorded"), {}, [], 0.0, address="10.0.0.7")
    await controller.registered(seen)
    app = build_admin_app(
        tenancy=tenancy,
        master_key_sha256=sha256(MASTER_KEY),
        guard=admin_guard(clock),
        registry=CollectorRegistry(),
        models_ready=dict,
        draining=lambda: False,
        fleet=controller,
    )
    async with make_client(app) as client:
        yield FleetApi(client, world, controller)


@pytest.mark.parametrize("user", ["master", "alice", "pat"])
async def test_proxy_admins_and_viewers_read_the_fleet(fleet_api: FleetApi, user: str) -> None:
    nodes = await fleet_api.client.get("/admin/nodes", headers=fleet_api.headers(user))
    assert nodes.status_code == 200, nodes.text
    [node] = nodes.json()["data"]
    assert (node["name"], node["state"], node["address"]) == ("gpu01", "healthy", "10.0.0.7")
    placement = await fleet_api.client.get("/admin/placement", headers=fleet_api.headers(user))
    [chat] = placement.json()["data"]
    assert (chat["model"], chat["wanted"]) == ("chat", 1)
    replicas = await fleet_api.client.get("/admin/replicas", headers=fleet_api.headers(user))
    assert replicas.status_code == 200


@pytest.mark.parametrize("user", ["vic", "val"])
async def test_organisation_and_team_viewers_do_not_see_the_fleet(
    fleet_api: FleetApi, user: str
) -> None:
    for path in ("/admin/nodes", "/admin/placement", "/admin/replicas"):
        answer = await fleet_api.client.get(path, headers=fleet_api.headers(user))
        assert answer.status_code == 403, (path, answer.text)
        assert answer.json()["error"]["code"] == "forbidden"
        assert "gpu01" not in answer.text


async def test_only_a_proxy_admin_cordons_and_a_cordon_is_in_the_store(
    fleet_api: FleetApi, store: Store
) -> None:
    refused = await fleet_api.client.post(
        "/admin/nodes/gpu01/drain", headers=fleet_api.headers("pat")
    )
    assert refused.status_code == 403
    assert not fleet_api.controller.nodes["gpu01"].draining
    done = await fleet_api.client.post(
        "/admin/nodes/gpu01/cordon", headers=fleet_api.headers("alice")
    )
    assert done.status_code == 200, done.text
    assert (done.json()["cordoned"], done.json()["draining"]) == (True, False)
    again = FleetController(SETTINGS, [CHAT], store, ReplicaRegistry([]), _replica)
    await again.load()
    assert again.nodes["gpu01"].cordoned  # persisted: a restart keeps it
    events = await fleet_api.world.tenancy.audit.list(OPERATOR)
    assert [(e.action, e.actor, e.target) for e in events if e.action.startswith("node.")] == [
        ("node.cordoned", "user:alice", "node:gpu01")
    ]
    unknown = await fleet_api.client.post(
        "/admin/nodes/gpu99/cordon", headers=fleet_api.headers("alice")
    )
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "node_not_found"
    wrong = await fleet_api.client.post(
        "/admin/nodes/gpu01/reboot", headers=fleet_api.headers("alice")
    )
    assert wrong.status_code in (400, 404, 422)
    assert "error" in wrong.json()


async def test_a_proxy_admin_restarts_a_crash_looping_replica_and_it_is_audited(
    fleet_api: FleetApi,
) -> None:
    controller = fleet_api.controller
    controller._settle_until = 0.0  # past the wait for the agents to register
    await controller.tick()
    [placed] = controller.replicas_view()
    looping = fleet_pb2.ReplicaStatus(
        replica_id=placed["id"], state="crash_loop", restarts=6, exit_code=2, tail=["bad flag"]
    )
    seen = NodeSeen("gpu01", Inventory(source="recorded"), {}, [], 0.0, address="10.0.0.7")
    await controller.received(seen, fleet_pb2.AgentMessage(status=looping))
    assert controller.replicas_view()[0]["state"] == "crash_loop"
    path = f"/admin/replicas/{placed['id']}/restart"

    refused = await fleet_api.client.post(path, headers=fleet_api.headers("pat"))
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "forbidden"
    assert controller.replicas_view()[0]["generation"] == 0

    done = await fleet_api.client.post(path, headers=fleet_api.headers("alice"))
    assert done.status_code == 200, done.text
    body = done.json()
    assert (body["state"], body["generation"], body["restarts"], body["detail"]) == (
        "placed",
        1,
        0,
        "",
    )
    [spec] = controller.service.desired("gpu01").replicas
    assert spec.generation == 1  # what makes the agent launch it afresh
    events = await fleet_api.world.tenancy.audit.list(OPERATOR)
    [event] = [e for e in events if e.action == "replica.restarted"]
    assert (event.actor, event.target) == ("user:alice", f"replica:{placed['id']}")

    unknown = await fleet_api.client.post(
        "/admin/replicas/chat-gpu99-1/restart", headers=fleet_api.headers("alice")
    )
    assert unknown.status_code == 404
    error = unknown.json()["error"]
    assert (error["code"], error["type"]) == ("replica_not_found", "not_found_error")
