"""The node agent against a real gRPC control plane (mutual TLS): it launches the
simulated engine the desired state names and reports it ready, keeps it serving
across a control-plane restart without relaunching it, backs off when refused, and
stops at once while its stream is blocked reading."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from tests.fleet.plane import Plane, Recording, plane, serving, until
from tests.inventory.test_inventory import smi_inventory
from tests.redis_server import free_port
from tests.tls_certs import Issued

from fairgate.fleet.agent import Agent
from fairgate.fleet.control import ControlPlaneService
from fairgate.fleet.state import StateDir, StateDirBusy
from fairgate.fleet.v1 import fleet_pb2
from fairgate.inventory import Inventory
from fairgate.inventory.probe import ProbeError

__all__ = ["plane"]  # the fixture

pytestmark = pytest.mark.slow


def agent_for(plane: Plane, node: str, cert: Issued, **options: Any) -> Agent:
    credentials = grpc.ssl_channel_credentials(
        root_certificates=plane.pki.ca.pem.encode(),
        private_key=cert.key_pem.encode(),
        certificate_chain=cert.cert_pem.encode(),
    )
    return Agent(
        credentials=credentials,
        node_name=node,
        channel_options=[("grpc.ssl_target_name_override", "localhost")],
        backoff_base=0.05,
        backoff_cap=0.4,
        **{
            "target": f"127.0.0.1:{plane.port}",
            "inventory": lambda: Inventory(source="none"),
            "supervisor_options": {"health_interval": 0.1, "backoff_base": 0.1},
            **options,
        },
    )


async def test_launches_what_is_wanted_and_survives_a_control_plane_restart(plane: Plane) -> None:
    agent = agent_for(plane, "cpu01", plane.pki.ca.issue("cpu01", dns_names=("cpu01",)))
    running = asyncio.create_task(agent.run())
    try:
        await until(lambda: "cpu01" in plane.service.nodes)
        engine_port = free_port()
        spec = fleet_pb2.ReplicaSpec(
            replica_id="sim-0",
            engine="sim",
            model="sim",
            served_name="tiny",
            port=engine_port,
            args=["--speed", "0"],
        )
        version = plane.service.set_desired("cpu01", [spec])
        node = plane.service.nodes["cpu01"]
        await until(
            lambda: (
                node.statuses.get("sim-0") is not None and node.statuses["sim-0"].state == "ready"
            )
        )
        assert node.applied_version == version
        assert await serving(engine_port)
        pid = node.statuses["sim-0"].pid
        os.kill(pid, 0)

        # The control plane goes away: the engine keeps serving, the agent dials again.
        await plane.stop()
        await until(lambda: agent.failures >= 2)
        assert await serving(engine_port)
        plane.service = ControlPlaneService(heartbeat_interval=0.2)  # restarted: no memory
        plane.service.set_desired("cpu01", [spec])
        await plane.start()
        await until(
            lambda: (
                "cpu01" in plane.service.nodes and plane.service.nodes["cpu01"].applied_version >= 1
            )
        )
        registered = plane.service.nodes["cpu01"]
        assert [(r.replica_id, r.state, r.pid) for r in registered.running] == [
            ("sim-0", "ready", pid)
        ]
        assert agent.replicas["sim-0"][1].pid == pid  # adopted, not relaunched

        # Heartbeats keep the node seen.
        seen = registered.last_seen
        await until(lambda: registered.last_seen > seen, timeout=5)

        # Not wanted any more: drained and stopped.
        plane.service.set_desired("cpu01", [])
        await until(lambda: "sim-0" not in agent.replicas)
        assert not await serving(engine_port)
    finally:
        await agent.stop(stop_engines=True)
        await running


async def test_a_refused_agent_backs_off_and_says_why(
    plane: Plane, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    agent = agent_for(plane, "gpu02", plane.pki.ca.issue("gpu01", dns_names=("gpu01",)))
    running = asyncio.create_task(agent.run())
    try:
        await until(lambda: agent.failures >= 3)
    finally:
        await agent.stop()
        await running
    assert agent.connects == 0
    assert "PERMISSION_DENIED" in agent.last_error
    assert plane.service.refusals >= 3
    assert "a certificate for gpu01 claimed to be node 'gpu02'" in caplog.text
    delays = [agent.backoff(n) for n in (1, 2, 3, 4)]
    assert delays[0] <= 0.05 < delays[3]  # it grows, it does not reset on a refusal


async def test_stop_returns_while_the_stream_is_blocked_reading(plane: Plane) -> None:
    agent = agent_for(plane, "cpu01", plane.pki.ca.issue("cpu01", dns_names=("cpu01",)))
    running = asyncio.create_task(agent.run())
    await until(lambda: agent.connects == 1)
    # Nothing comes down the stream now; the agent is parked in its read.
    await asyncio.sleep(0.3)
    await agent.stop()
    async with asyncio.timeout(5):
        await running
    assert running.done() and running.exception() is None


async def test_a_crash_looping_engine_stops_retrying_says_why_and_waits_for_an_operator(
    plane: Plane, tmp_path: Path
) -> None:
    """A real engine that exits at once (the simulator given an option it does not have):
    restarts back off into crash_loop with the exit code and output, reported to the
    control plane; no more launches, even across an agent restart; a higher generation
    launches it again."""
    state = StateDir(tmp_path / "state")
    state.lock()
    options = {"health_interval": 0.1, "backoff_base": 0.05, "backoff_cap": 0.2, "max_restarts": 2}

    def new_agent() -> Agent:
        cert = plane.pki.ca.issue("cpu01", dns_names=("cpu01",))
        return agent_for(plane, "cpu01", cert, state_dir=state, supervisor_options=options)

    spec = fleet_pb2.ReplicaSpec(
        replica_id="bad-0",
        engine="sim",
        model="sim",
        served_name="bad",
        port=free_port(),
        args=["--no-such-option"],
    )
    plane.service.set_desired("cpu01", [spec])
    recording = plane.service
    assert isinstance(recording, Recording)
    seen = recording.statuses
    agent = new_agent()
    running = asyncio.create_task(agent.run())
    try:
        await until(lambda: any(s.state == "crash_loop" for s in seen()), timeout=60)
        loop = next(s for s in seen() if s.state == "crash_loop")
        assert loop.exit_code == 2 and loop.restarts == 2
        assert any("No such option: --no-such-option" in line for line in loop.tail)
        assert [s.state for s in seen()].count("starting") == 3
        assert [s.state for s in seen()].count("failed") == 2
        await asyncio.sleep(1.0)
        assert [s.state for s in seen()].count("starting") == 3  # it gave up
    finally:
        await agent.stop()
        await running

    # A restarted agent keeps it in crash_loop and launches nothing.
    recording.received.clear()
    agent = new_agent()
    running = asyncio.create_task(agent.run())
    try:
        await until(lambda: plane.service.nodes["cpu01"].connected and agent.connects == 1)
        registered = plane.service.nodes["cpu01"].running
        assert [(r.replica_id, r.state, r.exit_code) for r in registered] == [
            ("bad-0", "crash_loop", 2)
        ]
        await until(lambda: plane.service.nodes["cpu01"].applied_version == 1)
        await asyncio.sleep(0.5)
        assert "starting" not in [s.state for s in seen()]

        # The operator acts: a higher generation launches it afresh.
        fixed = fleet_pb2.ReplicaSpec()
        fixed.CopyFrom(spec)
        fixed.generation = 1
        plane.service.set_desired("cpu01", [fixed])
        await until(lambda: any(s.state == "starting" and s.generation == 1 for s in seen()))
    finally:
        await agent.stop(stop_engines=True)
        await running
        state.unlock()


def test_one_agent_per_state_directory(tmp_path: Path) -> None:
    first, second = StateDir(tmp_path / "s"), StateDir(tmp_path / "s")
    first.lock()
    try:
        with pytest.raises(StateDirBusy, match="another agent"):
            second.lock()
    finally:
        first.unlock()
    second.lock()
    second.unlock()


async def test_heartbeats_carry_the_inventory_when_it_changes_and_a_failed_probe_is_survived(
    plane: Plane, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="fairgate.fleet.agent")
    answers: list[Inventory | Exception] = [ProbeError("nvidia-smi exited 9")]

    def inventory() -> Inventory:
        answer = answers[-1]
        if isinstance(answer, Exception):
            raise answer
        return answer

    cert = plane.pki.ca.issue("gpu01", dns_names=("gpu01",))
    agent = agent_for(plane, "gpu01", cert, inventory=inventory, inventory_interval=0)
    running = asyncio.create_task(agent.run())
    try:
        # The first probe fails: the node registers all the same, with no GPUs to place on.
        await until(lambda: "gpu01" in plane.service.nodes)
        node = plane.service.nodes["gpu01"]
        assert node.inventory.gpus == ()
        assert "inventory probe failed" in caplog.text and "exited 9" in caplog.text
        # Another job starts on GPU 5: the next heartbeat says so.
        answers.append(smi_inventory("hgx-h100"))
        await until(lambda: len(node.inventory.gpus) == 8, timeout=10)
        assert node.inventory.gpus[5].processes == 1
        recording = plane.service
        assert isinstance(recording, Recording)

        def refreshes() -> tuple[int, int]:
            beats = [m.heartbeat for m in recording.received if m.HasField("heartbeat")]
            return len(beats), sum(bool(b.inventory_json) for b in beats)

        count, sent = refreshes()
        assert sent == 1
        await until(lambda: refreshes()[0] > count + 2, timeout=10)
        assert refreshes()[1] == 1  # unchanged since: not sent again
    finally:
        await agent.stop()
        await running


async def test_a_replica_no_longer_wanted_drains_its_requests_before_it_stops(
    plane: Plane,
) -> None:
    """The engine is stopped only once its /metrics shows nothing running or waiting: a
    request streaming when the control plane drops the replica finishes whole, and the
    engine still answers while it does."""
    cert = plane.pki.ca.issue("cpu01", dns_names=("cpu01",))
    agent = agent_for(plane, "cpu01", cert, drain_seconds=60)
    running = asyncio.create_task(agent.run())
    port = free_port()
    spec = fleet_pb2.ReplicaSpec(
        replica_id="sim-0",
        engine="sim",
        model="sim",
        served_name="tiny",
        port=port,
        args=["--speed", "10"],
    )
    recording = plane.service
    assert isinstance(recording, Recording)
    try:
        await until(lambda: "cpu01" in plane.service.nodes)
        plane.service.set_desired("cpu01", [spec])
        await until(lambda: any(s.state == "ready" for s in recording.statuses()), timeout=60)
        chunks: list[str] = []
        async with aiohttp.ClientSession() as session:
            body = {
                "model": "tiny",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 30,
                "stream": True,
            }
            async with session.post(
                f"http://127.0.0.1:{port}/v1/chat/completions", json=body
            ) as answer:
                assert answer.status == 200
                async for line in answer.content:
                    chunks.append(line.decode())
                    if len(chunks) == 4:  # streaming: now the replica is dropped
                        plane.service.set_desired("cpu01", [])
                        await until(
                            lambda: any(s.state == "draining" for s in recording.statuses())
                        )
                        assert await serving(port)  # not signalled while a request runs
        assert any(c.strip() == "data: [DONE]" for c in chunks)  # the stream finished whole
        await until(lambda: "sim-0" not in agent.replicas, timeout=30)
        assert not await serving(port)
        assert [s.state for s in recording.statuses()][-1] == "stopped"
    finally:
        await agent.stop(stop_engines=True)
        await running


async def test_given_a_standby_and_the_holder_the_agent_dials_on_to_the_holder(
    plane: Plane, tmp_path: Path
) -> None:
    standby = Plane(plane.pki)
    standby.service = ControlPlaneService(accepting=lambda: False)  # another holds the lease
    await standby.start()
    agent = agent_for(
        plane,
        "cpu01",
        plane.pki.ca.issue("cpu01", dns_names=("cpu01",)),
        target=[f"127.0.0.1:{standby.port}", f"127.0.0.1:{plane.port}"],
    )
    running = asyncio.create_task(agent.run())
    try:
        await until(lambda: agent.connects == 1)
        assert "cpu01" in plane.service.nodes and standby.service.nodes == {}
        assert agent.failures == 0  # registered: the backoff starts afresh
    finally:
        await agent.stop()
        await running
        await standby.stop()


async def test_a_key_sent_inline_is_written_to_a_private_file_and_removed_with_the_replica(
    plane: Plane,
) -> None:
    """A vault key the control plane sends (`api_key`): with no state directory the agent
    keeps it in a private directory of its own; the engine requires it, and the spec the
    agent holds names the file, not the key."""
    agent = agent_for(plane, "cpu01", plane.pki.ca.issue("cpu01", dns_names=("cpu01",)))
    running = asyncio.create_task(agent.run())
    key = "sk-inline-engine-key-0123456789"
    try:
        await until(lambda: "cpu01" in plane.service.nodes)
        engine_port = free_port()
        spec = fleet_pb2.ReplicaSpec(
            replica_id="sim-0",
            engine="sim",
            model="sim",
            served_name="tiny",
            port=engine_port,
            args=["--speed", "0"],
            api_key=key,
        )
        plane.service.set_desired("cpu01", [spec])
        node = plane.service.nodes["cpu01"]
        await until(lambda: node.statuses.get("sim-0") is not None)
        await until(lambda: node.statuses["sim-0"].state == "ready")
        held, sup = agent.replicas["sim-0"]
        assert held.api_key == "" and held.api_key_ref
        key_file = Path(held.api_key_ref)
        assert key_file.read_text().strip() == key
        assert key_file.stat().st_mode & 0o777 == 0o600
        assert key_file.parent.stat().st_mode & 0o777 == 0o700
        assert not any(key in arg for arg in sup.command.argv)
        url = f"http://127.0.0.1:{engine_port}/v1/models"
        async with aiohttp.ClientSession() as session:
            async with session.get(url) as bare:
                assert bare.status == 401
            async with session.get(url, headers={"Authorization": f"Bearer {key}"}) as keyed:
                assert keyed.status == 200
        plane.service.set_desired("cpu01", [])
        await until(lambda: "sim-0" not in agent.replicas)
        assert not key_file.exists()
    finally:
        await agent.stop(stop_engines=True)
        await running


class FreezingProxy:
    """A TCP relay to the control plane that can stop relaying without closing anything:
    what the agent sees when the control plane's host hangs or the network between them
    is cut (no reset, no FIN; the agent's writes are still accepted by its own kernel)."""

    def __init__(self, target_port: int) -> None:
        self._target = target_port
        self._relaying = asyncio.Event()
        self._relaying.set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def freeze(self) -> None:
        self._relaying.clear()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for writer in self._writers:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._target)
        self._writers += [writer, up_writer]
        for pump in (self._pump(reader, up_writer), self._pump(up_reader, writer)):
            task = asyncio.create_task(pump)
            self._tasks.add(task)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            await self._relaying.wait()  # frozen: read no more, close nothing
            writer.write(data)
            await writer.drain()


async def test_a_control_plane_that_stops_answering_without_a_reset_is_left_for_the_next(
    plane: Plane,
) -> None:
    """The control plane's host hangs or the network is cut: no reset reaches the agent.
    Its keepalive pings go unanswered, so it dials the next address (the standby that
    holds the lease by then) instead of writing heartbeats into the void."""
    proxy = FreezingProxy(plane.port)
    await proxy.start()
    agent = agent_for(
        plane,
        "cpu01",
        plane.pki.ca.issue("cpu01", dns_names=("cpu01",)),
        target=[f"127.0.0.1:{proxy.port}", f"127.0.0.1:{plane.port}"],
    )  # the default keepalive: a ping after 10 s, unanswered for 10 s more
    running = asyncio.create_task(agent.run())
    try:
        await until(lambda: "cpu01" in plane.service.nodes and agent.connects == 1)
        through_proxy = plane.service.nodes["cpu01"]
        proxy.freeze()
        # the plane holds the new registration a moment before the agent reads its
        # answer and counts the connection: wait for both
        await until(
            lambda: plane.service.nodes["cpu01"] is not through_proxy and agent.connects == 2,
            timeout=90,
        )
        assert plane.service.nodes["cpu01"].connected
    finally:
        await agent.stop()
        await running
        await proxy.close()
