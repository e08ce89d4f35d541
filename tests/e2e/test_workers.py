"""``fairgate serve --workers N``: N processes share the listening sockets.

Each worker draws its own random request-id prefix (the first 12 hex digits),
which tells which process answered. SIGTERM to the parent is forwarded to every
worker; a stop signal that reaches every process at once (systemd's default,
a terminal's Ctrl-C) still drains instead of counting as a second signal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.conftest import AUTH, StartGateway, StartSim, model, write_config
from tests.e2e.robust_wire import (
    PATIENT_HEALTH,
    chat_body,
    connect,
    post,
    read_to_end,
    read_until,
    until,
)

from fairgate.server.process import GatewayProcess

pytestmark = pytest.mark.slow


def children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(child) for child in text.split()]


def answering_process(gateway: GatewayProcess) -> str:
    request = urllib.request.Request(
        gateway.url + "/v1/chat/completions",
        data=chat_body(stream=False, max_tokens=2),
        headers={"content-type": "application/json", **AUTH},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
        request_id: str = response.headers["x-request-id"]
    return request_id[:12]


def refuses_connections(gateway: GatewayProcess) -> bool:
    try:
        connect(gateway.host, gateway.port).close()
    except ConnectionRefusedError:
        return True
    return False


def start(
    start_sim: StartSim, start_gateway: StartGateway, speed: str, state: dict[str, Any]
) -> GatewayProcess:
    sim = start_sim("--model", "m", "--speed", speed, "--ttft", "0")
    gateway = start_gateway(
        [model("m", sim)],
        "--workers",
        "2",
        proxy={"shutdown_grace": "20s"},
        health=PATIENT_HEALTH,
        state=state,
    )
    until(lambda: len(children(gateway.pid or 0)) == 2, 10, "two workers running")
    return gateway


def test_workers_are_refused_with_the_memory_state_back_end(tmp_path: Path) -> None:
    upstreams = [{"name": "r0", "url": "http://127.0.0.1:9"}]
    config = write_config(tmp_path, [model("m", upstreams=upstreams)])
    done = subprocess.run(
        [sys.executable, "-m", "fairgate", "serve", "--config", str(config), "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--workers 2 needs state.backend: redis" in done.stderr
    assert "multiplied by the number of workers" in done.stderr


def test_two_workers_share_the_port_and_sigterm_stops_them_all(
    start_sim: StartSim, start_gateway: StartGateway, redis_state: dict[str, Any]
) -> None:
    gateway = start(start_sim, start_gateway, "0", redis_state)
    workers = children(gateway.pid or 0)
    seen: set[str] = set()
    deadline = time.monotonic() + 60
    for _ in range(300):
        seen.add(answering_process(gateway))
        if len(seen) == 2 or time.monotonic() > deadline:
            break
    assert len(seen) == 2, "every request was answered by the same process"

    os.kill(gateway.pid or 0, signal.SIGTERM)
    assert gateway.wait(30) == 0
    assert not any(Path(f"/proc/{pid}").exists() for pid in workers)
    assert refuses_connections(gateway)


def test_a_signal_to_every_process_drains_streams_and_refuses_new_connections(
    start_sim: StartSim, start_gateway: StartGateway, redis_state: dict[str, Any]
) -> None:
    gateway = start(start_sim, start_gateway, "10", redis_state)
    sock = connect(gateway.host, gateway.port)
    post(sock, "/v1/chat/completions", chat_body(stream=True, max_tokens=60))  # about 6 s
    assert read_until(sock, lambda got: b"data: {" in got, timeout=30).startswith(b"HTTP/1.1 200")

    # As systemd does: every process gets the signal, and the parent forwards its own.
    for pid in children(gateway.pid or 0):
        os.kill(pid, signal.SIGTERM)
    time.sleep(0.2)
    os.kill(gateway.pid or 0, signal.SIGTERM)
    # While the stream drains, no process keeps the port accepting connections
    # that nobody would serve.
    until(lambda: refuses_connections(gateway), 3, "new connections are refused")
    with pytest.raises(subprocess.TimeoutExpired):
        gateway.wait(0.1)
    rest, ended = read_to_end(sock, 30)
    sock.close()
    assert rest.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n") and ended == "eof"
    assert gateway.wait(30) == 0


def test_a_signal_while_the_workers_start_stops_them_cleanly(
    start_sim: StartSim, start_gateway: StartGateway, redis_state: dict[str, Any]
) -> None:
    # The parent announces the port once it has forked; its workers may still be
    # starting (store, sync, restore). A stop then must not kill them mid-way.
    gateway = start(start_sim, start_gateway, "0", redis_state)
    for pid in children(gateway.pid or 0):
        os.kill(pid, signal.SIGTERM)
    os.kill(gateway.pid or 0, signal.SIGTERM)
    assert gateway.wait(30) == 0
