"""The control plane (`FleetController` on a real store, its gRPC server with mutual TLS)
and real agents in one process, launching the simulated engine: an operator's restart
taking a replica out of crash_loop once its cause is fixed; an agent stopping its
engines as it shuts down, its acknowledged stops letting the control plane place the
replicas elsewhere at once."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.fleet.plane import until
from tests.fleet.test_agent import agent_for
from tests.redis_server import free_port, port_block
from tests.tls_certs import Pki

from fairgate.config import Model
from fairgate.config.fleet import ControlPlane
from fairgate.core.breaker import Breaker
from fairgate.engines import adapter_for
from fairgate.fleet.agent import Agent
from fairgate.fleet.control import server_credentials
from fairgate.fleet.controller import FleetController
from fairgate.fleet.state import StateDir
from fairgate.store import Store, upgrade
from fairgate.upstream import Replica, ReplicaRegistry

pytestmark = pytest.mark.slow


def sim(replicas: int = 1, args: Sequence[str] = ("--speed", "0")) -> Model:
    return Model.model_validate(
        {
            "name": "chat",
            "deploy": {
                "engine": "sim",
                "model": "sim",
                "gpus_per_replica": 0,
                "replicas": replicas,
                "args": list(args),
            },
        }
    )


def make_replica(model: Model, name: str, url: str) -> Replica:
    return Replica(name, model.name, url, 1, None, adapter_for("vllm"), Breaker())


@dataclass
class Plane:
    """What `agent_for` needs of a control plane: its CA and port."""

    pki: Pki
    port: int


class Fleet:
    """A control plane on a real SQLite store, started and restarted on one port, and
    agents dialling it."""

    def __init__(self, directory: Path, store: Store) -> None:
        self.directory = directory
        self.store = store
        self.plane = Plane(Pki.make(directory), free_port())
        first = port_block(20)
        self.settings = ControlPlane.model_validate(
            {
                "listen": {"host": "127.0.0.1", "port": self.plane.port},
                "tls": {"cert_file": "/x", "key_file": "/x", "client_ca_file": "/x"},
                "heartbeat_interval": 0.2,
                "unreachable_after": 0.6,
                "lost_after": 60.0,
                "ports": {"first": first, "last": first + 19},
            }
        )
        self.controller: FleetController | None = None
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None
        self.agents: list[tuple[Agent, asyncio.Task[None], StateDir]] = []

    async def start(self, *models: Model) -> FleetController:
        controller = FleetController(
            self.settings, models, self.store, ReplicaRegistry([]), make_replica
        )
        await controller.load()
        pki = self.plane.pki
        self._server = await controller.serve(
            server_credentials(
                pki.server.cert_pem.encode(), pki.server.key_pem.encode(), pki.ca.pem.encode()
            )
        )
        self._task = asyncio.create_task(controller.run())
        self.controller = controller
        return controller

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None

    def agent(self, node: str, **supervisor: float) -> Agent:
        state = StateDir(self.directory / f"state-{node}")
        state.lock()
        cert = self.plane.pki.ca.issue(node, dns_names=(node,))
        options = {"health_interval": 0.1, "backoff_base": 0.05, "backoff_cap": 0.2}
        agent = agent_for(
            self.plane,  # type: ignore[arg-type]
            node,
            cert,
            state_dir=state,
            supervisor_options={**options, **supervisor},
        )
        self.agents.append((agent, asyncio.create_task(agent.run()), state))
        return agent

    async def close(self) -> None:
        for agent, task, state in self.agents:
            await agent.stop(stop_engines=True)
            await task
            state.unlock()
        await self.stop()


@pytest.fixture
async def fleet(tmp_path: Path) -> AsyncIterator[Fleet]:
    store = Store(f"sqlite:///{tmp_path}/fleet.db")
    await store.connect()
    await upgrade(store)
    f = Fleet(tmp_path, store)
    try:
        yield f
    finally:
        await f.close()
        await store.close()


def states(controller: FleetController) -> list[tuple[str, str, int]]:
    return [(r["node"], r["state"], r["generation"]) for r in controller.replicas_view()]


async def test_a_crash_looping_replica_restarted_by_the_operator_serves_once_fixed(
    fleet: Fleet, tmp_path: Path
) -> None:
    """The engine exits at once (the simulator given an option it does not have) and
    backs off into crash_loop; the configuration is fixed and the gateway restarted, which
    relaunches nothing (the same generation); `fairgate replicas restart` raises the
    generation in the store, the running control plane sends it and the agent launches
    the fixed engine, which joins routing."""
    controller = await fleet.start(sim(args=["--no-such-option"]))
    fleet.agent("cpu01", max_restarts=2)
    await until(lambda: states(controller) == [("cpu01", "crash_loop", 0)], timeout=60)
    [looping] = controller.replicas_view()
    assert "No such option: --no-such-option" in looping["detail"]

    await fleet.stop()  # the operator fixes the configuration and restarts the gateway
    controller = await fleet.start(sim(args=["--speed", "0"]))
    await until(
        lambda: controller.nodes.get("cpu01") is not None and controller.nodes["cpu01"].connected
    )
    await asyncio.sleep(1.0)
    assert states(controller) == [("cpu01", "crash_loop", 0)]  # nothing relaunched
    assert controller.registry.replicas("chat") == ()

    config = tmp_path / "gateway.yaml"
    config.write_text(
        f'store: {{url: "sqlite:///{tmp_path}/fleet.db"}}\n'
        'models: [{name: m, upstreams: [{name: u, url: "http://127.0.0.1:9"}]}]\n'
    )
    restart = [sys.executable, "-m", "fairgate", "replicas", "restart"]
    done = await asyncio.to_thread(
        subprocess.run,
        [*restart, looping["id"], "-c", str(config), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert '"generation": 1' in done.stdout and '"restarts": 0' in done.stdout
    await until(lambda: states(controller) == [("cpu01", "ready", 1)], timeout=60)
    [routed] = controller.registry.replicas("chat")
    assert routed.name == looping["id"]
    [replica] = controller.replicas_view()
    assert (replica["restarts"], replica["detail"], replica["routed"]) == (0, "", True)

    unknown = await asyncio.to_thread(
        subprocess.run,
        [*restart, "chat-cpu09-1", "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert unknown.returncode == 1 and "no replica 'chat-cpu09-1' is placed" in unknown.stderr


async def test_an_agent_stopping_its_engines_has_them_placed_elsewhere_before_its_node_is_lost(
    fleet: Fleet,
) -> None:
    controller = await fleet.start(sim(replicas=2))
    leaving = fleet.agent("cpu01")
    fleet.agent("cpu02")
    await until(
        lambda: sorted(states(controller)) == [("cpu01", "ready", 0), ("cpu02", "ready", 0)],
        timeout=60,
    )
    await leaving.stop(stop_engines=True)  # as on SIGTERM with --stop-engines
    await until(
        lambda: states(controller) == [("cpu02", "ready", 0), ("cpu02", "ready", 0)],
        timeout=30,
    )
    # Placed again on the acknowledged stop, not on the node being lost (lost_after 60 s).
    assert controller.nodes["cpu01"].state != "lost"
    assert len(controller.registry.replicas("chat")) == 2
