"""What the fleet's end-to-end tests share: the certificates and agents of a fleet, a
control plane's configuration, the admin API, and traffic through the `openai` SDK."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import httpx
import openai
from tests.e2e.conftest import write_config
from tests.redis_server import free_port, port_block
from tests.tls_certs import Pki

from fairgate.server.process import ControlPlaneProcess, GatewayProcess

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


def admin(gateway: GatewayProcess | ControlPlaneProcess, path: str) -> Any:
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
        self.addresses = [f"127.0.0.1:{self.port}"]
        """What the agents are given as --control-plane (comma-separated)."""
        self.agents: dict[str, subprocess.Popen[bytes]] = {}

    def certificate(self, name: str) -> tuple[Path, Path]:
        return self.pki.ca.issue(name, dns_names=(name,)).write(self.directory, name)

    def agent(
        self,
        node: str,
        *,
        cert_of: str | None = None,
        prefix: Sequence[str] = (),
        addresses: Sequence[str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """``fairgate agent`` for ``node``, run behind ``prefix`` (``ip netns exec NS``: on
        a host of its own) and given ``addresses`` (else the fleet's) as --control-plane."""
        cert, key = self.certificate(cert_of or node)
        with (self.directory / f"agent-{node}.log").open("ab") as log:
            proc = self._popen(node, cert, key, log, prefix, addresses or self.addresses)
        self.agents[node] = proc
        return proc

    def _popen(
        self,
        node: str,
        cert: Path,
        key: Path,
        log: IO[bytes],
        prefix: Sequence[str],
        addresses: Sequence[str],
    ) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                *prefix,
                sys.executable,
                "-m",
                "fairgate",
                "agent",
                "--control-plane",
                ",".join(addresses),
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


def gateway_config(
    fleet: Fleet,
    *,
    args: Sequence[str] = ("--speed", "0"),
    model: Mapping[str, Any] | None = None,
    unreachable_after: str = "8s",
    name: str = "gateway.yaml",
    port: int | None = None,
    control_plane: bool = True,
    settings: Mapping[str, Any] | None = None,
    journal: str | None = None,
    **sections: Any,
) -> Path:
    """A gateway with model ``chat``: two simulated replicas launched with ``args``;
    ``model`` adds keys to the model (``pool``, ``aliases``…), ``sections`` to the file.
    It has the control plane (agents' port ``port``, else the fleet's; ``settings`` added
    to the section), or with ``control_plane=False`` none: a gateway that routes to the
    replicas the store holds. Written to ``name`` in the fleet's directory (one store for
    all); ``journal`` is its own usage-record journal, for several processes there."""
    directory = fleet.directory
    (directory / "master.key").write_text(MASTER + "\n")
    first = port_block(50)
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
    plane: dict[str, Any] = {
        "listen": {"host": "127.0.0.1", "port": port or fleet.port},
        "tls": {"cert_file": "cp.crt", "key_file": "cp.key", "client_ca_file": "ca.crt"},
        "heartbeat_interval": "0.5s",
        # long enough for both agents to start and register before the first placement
        "unreachable_after": unreachable_after,
        "lost_after": "12s",
        "ports": {"first": first, "last": first + 49},
        **(settings or {}),
    }
    if control_plane:
        sections["control_plane"] = plane
    if journal:
        sections["accounting"] = {"journal_path": journal}
    written = write_config(directory, [chat], master_key_file="master.key", **sections)
    return written if name == written.name else written.rename(directory / name)


def ready_replicas(gateway: GatewayProcess | ControlPlaneProcess) -> list[dict[str, Any]]:
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
