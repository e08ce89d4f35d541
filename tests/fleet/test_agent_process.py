"""`fairgate agent …` as an operator runs it, as a process, against a real control plane
(fleet.control.ControlPlaneService on a gRPC server in the test, mutual TLS with
certificates the suite makes).

It registers with a recorded inventory (what `fairgate agent inventory --json` printed)
and labels, and SIGTERM ends it promptly while
its stream is open; a certificate for another node is refused and the control plane's
log names both; engines outlive the agent (SIGKILL or SIGTERM) and the next agent with
the same state directory adopts them (same pid, reported ready in its registration),
supervises them (an adopted engine that dies is relaunched), keeps them across a
control-plane restart, and with --stop-engines drains and stops them on SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from pathlib import Path

import pytest
from tests.fleet.plane import Plane, plane, serving, until
from tests.inventory.test_agent_inventory_cli import fake_smi, needs_no_nvml, run_inventory
from tests.inventory.test_inventory import smi_inventory
from tests.redis_server import free_port

from fairgate.fleet.control import ControlPlaneService
from fairgate.fleet.v1 import fleet_pb2
from fairgate.inventory import Inventory

__all__ = ["plane"]  # the fixture

pytestmark = pytest.mark.slow

STOP_BOUND = 15.0
"""Seconds SIGTERM may take to end the agent (generous: a loaded test machine)."""


class AgentProcess:
    def __init__(self, proc: asyncio.subprocess.Process, log: Path) -> None:
        self.proc = proc
        self.log = log

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    async def terminate(self) -> float:
        """SIGTERM, and the seconds until it exited (fails past STOP_BOUND)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        self.proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(self.proc.wait(), STOP_BOUND)
        return loop.time() - started

    async def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()


async def start_agent(
    plane: Plane, tmp_path: Path, node: str, cert_for: str, *extra: str, tag: str = "a"
) -> AgentProcess:
    cert, key = plane.pki.ca.issue(cert_for, dns_names=(cert_for,)).write(tmp_path, cert_for)
    ca = plane.pki.ca.write(tmp_path / "ca.crt")
    log = tmp_path / f"agent-{tag}.log"
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "fairgate",
            "agent",
            "--control-plane",
            f"127.0.0.1:{plane.port}",
            "--server-name",
            "localhost",
            "--cert",
            str(cert),
            "--key",
            str(key),
            "--ca",
            str(ca),
            "--node-name",
            node,
            *extra,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
        )
    return AgentProcess(proc, log)


def engine_pids(state_dir: Path) -> list[int]:
    pids = []
    for record in (state_dir / "replicas").glob("*.json"):
        with contextlib.suppress(ValueError, OSError):
            pids.append(int(json.loads(record.read_text())["pid"]))
    return pids


def kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def test_registers_with_its_inventory_and_stops_promptly_on_sigterm(
    plane: Plane, tmp_path: Path
) -> None:
    recorded = tmp_path / "inventory.json"
    recorded.write_text(smi_inventory("hgx-h100").to_json())
    agent = await start_agent(
        plane,
        tmp_path,
        "gpu01",
        "gpu01",
        "--inventory",
        str(recorded),
        "--labels",
        "rack=r1,zone=a",
        "--state-dir",
        str(tmp_path / "state"),
    )
    try:
        await until(lambda: "gpu01" in plane.service.nodes, timeout=60)
        node = plane.service.nodes["gpu01"]
        assert len(node.inventory.gpus) == 8 and node.labels == {"rack": "r1", "zone": "a"}
        assert node.inventory.gpus[5].processes == 1
        # The stream is open and idle (the agent parked in its read): SIGTERM ends it.
        await until(lambda: node.applied_version == 0 and agent.proc.returncode is None)
        await asyncio.sleep(0.5)
        took = await agent.terminate()
        assert agent.proc.returncode == 0, agent.output()
        assert took < STOP_BOUND
        assert "registered with" in agent.output()
        await until(lambda: not node.connected, timeout=10)
    finally:
        await agent.kill()


async def test_a_certificate_for_another_node_is_refused_and_the_log_names_both(
    plane: Plane, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="fairgate.fleet.control")
    agent = await start_agent(
        plane, tmp_path, "gpu02", "gpu01", "--state-dir", str(tmp_path / "state")
    )
    try:
        await until(lambda: plane.service.refusals >= 2, timeout=60)
        assert "gpu02" not in plane.service.nodes
        assert "a certificate for gpu01 claimed to be node 'gpu02'" in caplog.text
        await agent.terminate()
    finally:
        await agent.kill()
    out = agent.output()
    assert "PERMISSION_DENIED" in out and "dialling again" in out
    assert "registered with" not in out


async def test_engines_outlive_the_agent_and_the_next_agent_adopts_them(
    plane: Plane, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    port = free_port()
    spec = fleet_pb2.ReplicaSpec(
        replica_id="sim-0",
        engine="sim",
        model="sim",
        served_name="tiny",
        port=port,
        args=["--speed", "0"],
    )
    plane.service.set_desired("cpu01", [spec])
    agents: list[AgentProcess] = []

    async def agent(*extra: str) -> AgentProcess:
        started = await start_agent(
            plane,
            tmp_path,
            "cpu01",
            "cpu01",
            "--state-dir",
            str(state),
            *extra,
            tag=str(len(agents)),
        )
        agents.append(started)
        return started

    def status() -> fleet_pb2.ReplicaStatus | None:
        node = plane.service.nodes.get("cpu01")
        return node.statuses.get("sim-0") if node is not None else None

    try:
        first = await agent()
        await until(lambda: (s := status()) is not None and s.state == "ready", timeout=90)
        pid = status().pid  # type: ignore[union-attr]
        assert not status().adopted  # type: ignore[union-attr]

        # The agent is killed outright: the engine serves on.
        first.proc.kill()
        await first.proc.wait()
        await until(lambda: not plane.service.nodes["cpu01"].connected, timeout=10)
        assert await serving(port)

        # The next agent adopts it: its registration already lists it ready, same pid.
        plane.service.nodes.clear()
        second = await agent()
        await until(lambda: "cpu01" in plane.service.nodes, timeout=60)
        node = plane.service.nodes["cpu01"]
        assert [(r.replica_id, r.state, r.pid, r.adopted) for r in node.running] == [
            ("sim-0", "ready", pid, True)
        ]
        assert node.applied_version == 1  # it remembered what it had applied
        assert plane.service.refusals == 0  # the registration came first on every stream
        await asyncio.sleep(0.5)
        assert status() is None or status().pid == pid  # type: ignore[union-attr]

        # The adopted engine dies: the agent notices and launches it again, as its child.
        kill_group(pid)
        await until(lambda: (s := status()) is not None and s.pid != pid, timeout=60)
        await until(lambda: (s := status()) is not None and s.state == "ready", timeout=90)
        relaunched = status()
        assert relaunched is not None and not relaunched.adopted and relaunched.restarts == 1
        pid = relaunched.pid

        # The control plane restarts: the engine serves throughout, nothing is relaunched.
        await plane.stop()
        assert await serving(port)
        plane.service = ControlPlaneService(heartbeat_interval=0.2)
        plane.service.set_desired("cpu01", [spec])
        await plane.start()
        await until(lambda: "cpu01" in plane.service.nodes, timeout=90)
        assert [(r.replica_id, r.state, r.pid) for r in plane.service.nodes["cpu01"].running] == [
            ("sim-0", "ready", pid)
        ]

        # SIGTERM ends the agent promptly and leaves the engine serving.
        await second.terminate()
        assert second.proc.returncode == 0, second.output()
        assert await serving(port)

        # An agent run with --stop-engines adopts it, and on SIGTERM drains and stops it.
        plane.service.nodes.clear()
        third = await agent("--stop-engines")
        await until(lambda: "cpu01" in plane.service.nodes, timeout=60)
        assert [r.pid for r in plane.service.nodes["cpu01"].running] == [pid]
        await third.terminate()
        assert third.proc.returncode == 0, third.output()
        assert not await serving(port)
        assert engine_pids(state) == []
    finally:
        for started in agents:
            await started.kill()
        for leftover in engine_pids(state):
            kill_group(leftover)


@needs_no_nvml
async def test_what_agent_inventory_json_prints_is_what_the_agent_registers(
    plane: Plane, tmp_path: Path
) -> None:
    printed = run_inventory(fake_smi(tmp_path, "pcie-a6000-pairs"), "--json")
    assert printed.returncode == 0, printed.stderr
    recorded = tmp_path / "recorded.json"
    recorded.write_text(printed.stdout)
    agent = await start_agent(
        plane,
        tmp_path,
        "ws01",
        "ws01",
        "--inventory",
        str(recorded),
        "--state-dir",
        str(tmp_path / "state"),
    )
    try:
        await until(lambda: "ws01" in plane.service.nodes, timeout=60)
        assert plane.service.nodes["ws01"].inventory == Inventory.from_json(printed.stdout)
        assert [g.nvlink_domain for g in plane.service.nodes["ws01"].inventory.gpus] == [0, 0, 1, 1]
        await agent.terminate()
    finally:
        await agent.kill()


async def test_a_second_agent_on_the_same_state_directory_exits_1(
    plane: Plane, tmp_path: Path
) -> None:
    state = str(tmp_path / "state")
    first = await start_agent(plane, tmp_path, "cpu01", "cpu01", "--state-dir", state)
    try:
        await until(lambda: "cpu01" in plane.service.nodes, timeout=60)
        second = await start_agent(
            plane, tmp_path, "cpu01", "cpu01", "--state-dir", state, tag="second"
        )
        assert await asyncio.wait_for(second.proc.wait(), 60) == 1
        assert "another agent is running with the state directory" in second.output()
        assert first.proc.returncode is None  # the first runs on
        await first.terminate()
    finally:
        await first.kill()
