"""The control plane inside `fairgate serve` with two real `fairgate agent` processes.

A gateway with `control_plane:` and a model whose `deploy:` profile runs two replicas
of the simulated engine without GPUs; two agents on loopback, each with its node's
certificate from the suite's CA and a recorded inventory. The replicas go one to each
node and serve through the gateway with the `openai` SDK. One node dies (its agent and
its engine killed): it goes unreachable, then lost, and its replica is placed on the
other node while traffic goes on (the failures are counted). An agent presenting
another node's certificate is refused and the refusal is logged naming both. The
gateway restarted: the agents register again and the engines are adopted, same pids.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import httpx
import openai
import pytest
from tests.e2e.conftest import TEST_KEY, write_config
from tests.redis_server import free_port
from tests.tls_certs import Pki

from fairgate.server.process import GatewayProcess

pytestmark = pytest.mark.slow

MASTER = "fg-master-" + "f" * 40
ADMIN = {"authorization": f"Bearer {MASTER}"}


def until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (httpx.HTTPError, KeyError, ValueError):
            last = None
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout:g}s: {what} (last: {last!r})")


def admin(gateway: GatewayProcess, path: str) -> Any:
    answer = httpx.get(gateway.admin_url + path, headers=ADMIN, timeout=10)
    answer.raise_for_status()
    return answer.json()["data"]


class Fleet:
    """The files of a control plane and its nodes, and the agents started on them."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.pki = Pki.make(directory)
        self.ca = self.pki.ca.write(directory / "ca.crt")
        self.pki.server.write(directory, "cp")
        (directory / "inventory.json").write_text('{"source": "recorded"}')
        self.port = free_port()
        self.agents: dict[str, subprocess.Popen[bytes]] = {}

    def certificate(self, name: str) -> tuple[Path, Path]:
        return self.pki.ca.issue(name, dns_names=(name,)).write(self.directory, name)

    def agent(self, node: str, *, cert_of: str | None = None) -> subprocess.Popen[bytes]:
        cert, key = self.certificate(cert_of or node)
        with (self.directory / f"agent-{node}.log").open("ab") as log:
            proc = self._popen(node, cert, key, log)
        self.agents[node] = proc
        return proc

    def _popen(self, node: str, cert: Path, key: Path, log: IO[bytes]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fairgate",
                "agent",
                "--control-plane",
                f"127.0.0.1:{self.port}",
                "--cert",
                str(cert),
                "--key",
                str(key),
                "--ca",
                str(self.ca),
                "--node-name",
                node,
                "--inventory",
                str(self.directory / "inventory.json"),
                "--state-dir",
                str(self.directory / f"state-{node}"),
                "--stop-engines",  # the engines end with the test
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )

    def stop(self) -> None:
        for proc in self.agents.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.agents.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    f = Fleet(tmp_path)
    try:
        yield f
    finally:
        f.stop()


def gateway_config(
    fleet: Fleet,
    *,
    args: Sequence[str] = ("--speed", "0"),
    model: Mapping[str, Any] | None = None,
    unreachable_after: str = "8s",
    **sections: Any,
) -> Path:
    """A gateway with the control plane and model ``chat``: two simulated replicas
    launched with ``args``; ``model`` adds keys to the model (``pool``, ``aliases``…),
    ``sections`` to the file."""
    directory = fleet.directory
    (directory / "master.key").write_text(MASTER + "\n")
    first = random.randrange(30000, 40000, 50)
    chat: dict[str, Any] = {
        "name": "chat",
        "engine": "vllm",
        "deploy": {
            "engine": "sim",
            "model": "sim",
            "gpus_per_replica": 0,
            "replicas": 2,
            "args": list(args),
        },
        **(model or {}),
    }
    return write_config(
        directory,
        [chat],
        master_key_file="master.key",
        control_plane={
            "listen": {"host": "127.0.0.1", "port": fleet.port},
            "tls": {"cert_file": "cp.crt", "key_file": "cp.key", "client_ca_file": "ca.crt"},
            "heartbeat_interval": "0.5s",
            # long enough for both agents to start and register before the first placement
            "unreachable_after": unreachable_after,
            "lost_after": "12s",
            "ports": {"first": first, "last": first + 49},
        },
        **sections,
    )


def ready_replicas(gateway: GatewayProcess) -> list[dict[str, Any]]:
    return [r for r in admin(gateway, "/admin/replicas") if r["state"] == "ready" and r["routed"]]


def chat(client: openai.OpenAI) -> str:
    answer = client.chat.completions.create(
        model="chat", messages=[{"role": "user", "content": "hello"}], max_tokens=4
    )
    return answer.choices[0].message.content or ""


class Traffic:
    """Requests one after another from a thread, counting what succeeds and what fails."""

    def __init__(self, client: openai.OpenAI) -> None:
        self.client = client
        self.ok = 0
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                chat(self.client)
                self.ok += 1
            except openai.APIError as exc:
                self.failed.append(repr(exc))
            time.sleep(0.05)

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)


def test_replicas_are_placed_replaced_refused_and_adopted(fleet: Fleet) -> None:
    config = gateway_config(fleet)
    stderr = fleet.directory / "gateway.log"
    gateway = GatewayProcess(config, stderr=stderr, startup_timeout=60).start()
    try:
        fleet.agent("gpu01")
        fleet.agent("gpu02")
        placed = until(
            lambda: len(r := ready_replicas(gateway)) == 2 and r, 90, "two replicas ready"
        )
        assert sorted(r["node"] for r in placed) == ["gpu01", "gpu02"]
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=TEST_KEY, max_retries=0)
        for _ in range(6):
            assert chat(client)
        [placement] = admin(gateway, "/admin/placement")
        assert (placement["model"], placement["wanted"], placement["missing"]) == ("chat", 2, 0)

        # An agent with gpu03's certificate claiming to be gpu09 is refused, and logged.
        fleet.agent("gpu09", cert_of="gpu03")
        until(
            lambda: "a certificate for gpu03 claimed to be node 'gpu09'" in stderr.read_text(),
            30,
            "the refusal in the gateway's log",
        )
        assert "gpu09" not in {n["name"] for n in admin(gateway, "/admin/nodes")}
        refused = fleet.agents.pop("gpu09")
        refused.kill()
        refused.wait(10)

        # gpu01 dies: its agent and its engine, at once.
        [doomed] = [r for r in placed if r["node"] == "gpu01"]
        with Traffic(client) as traffic:
            time.sleep(1)
            fleet.agents["gpu01"].kill()
            fleet.agents["gpu01"].wait(10)
            os.kill(doomed["pid"], signal.SIGKILL)
            until(
                lambda: any(
                    n["name"] == "gpu01" and n["state"] == "unreachable"
                    for n in admin(gateway, "/admin/nodes")
                ),
                30,
                "gpu01 unreachable",
            )
            until(
                lambda: any(
                    n["name"] == "gpu01" and n["state"] == "lost"
                    for n in admin(gateway, "/admin/nodes")
                ),
                30,
                "gpu01 lost",
            )
            moved = until(
                lambda: (
                    len(r := ready_replicas(gateway)) == 2
                    and all(x["node"] == "gpu02" for x in r)
                    and r
                ),
                60,
                "both replicas on gpu02",
            )
            served = traffic.ok
            until(lambda: traffic.ok >= served + 5, 30, "traffic after the re-placement")
        # Only a request in flight on the dead engine may fail (the gateway retries the
        # others before their first byte on the other node).
        assert len(traffic.failed) <= 1, traffic.failed
        assert traffic.ok > 10

        # The gateway restarts: the agent registers again, nothing is relaunched.
        pids = sorted(r["pid"] for r in moved)
        gateway.stop()
        gateway = GatewayProcess(config, stderr=stderr, startup_timeout=60).start()
        again = until(
            lambda: (
                any(n["name"] == "gpu02" and n["connected"] for n in admin(gateway, "/admin/nodes"))
                and len(r := ready_replicas(gateway)) == 2
                and r
            ),
            60,
            "gpu02 registered again with its replicas",
        )
        assert sorted(r["pid"] for r in again) == pids
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=TEST_KEY, max_retries=0)
        for _ in range(4):
            assert chat(client)
    finally:
        gateway.stop()
