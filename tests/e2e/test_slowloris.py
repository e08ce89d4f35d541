"""Clients that hold connections open by sending slowly, or too much, are cut off
while normal requests are served: a head has ``client_head_timeout`` to arrive, a
body ``client_body_timeout``, and a head may not exceed ``max_header_bytes``.
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from tests.e2e.conftest import TEST_KEY, model, write_config
from tests.e2e.robust_wire import PATIENT_HEALTH, chat_body, connect, get, read_to_end

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess

pytestmark = pytest.mark.slow

HEAD_TIMEOUT = 2.0
BODY_TIMEOUT = 2.0
MAX_HEAD = 8192
OPERATIONS = Path(__file__).parents[2] / "docs" / "operations.md"


@dataclass(frozen=True, slots=True)
class Env:
    sim: SimProcess
    gateway: GatewayProcess

    def connect(self) -> socket.socket:
        return connect(self.gateway.host, self.gateway.port)

    def served(self) -> bool:
        status, body = get(self.gateway.url + "/v1/models", timeout=10)
        return status == 200 and b'"m"' in body


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with ExitStack() as stack:
        sim = stack.enter_context(SimProcess("--model", "m", "--speed", "0"))
        config = write_config(
            tmp_path_factory.mktemp("gw"),
            [model("m", sim)],
            health=PATIENT_HEALTH,
            limits={
                "client_head_timeout": f"{HEAD_TIMEOUT}s",
                "client_body_timeout": f"{BODY_TIMEOUT}s",
                "max_header_bytes": MAX_HEAD,
            },
        )
        yield Env(sim, stack.enter_context(GatewayProcess(config)))


def closed_by_peer(sock: socket.socket, wait: float) -> bool:
    """True when the peer closed (EOF or reset) within ``wait`` seconds, nothing else received."""
    readable, _, _ = select.select([sock], [], [], wait)
    if not readable:
        return False
    try:
        data = sock.recv(65536)
    except ConnectionResetError:
        return True
    assert data == b"", f"expected the connection closed, got {data[:200]!r}"
    return True


def trickle(sock: socket.socket, data: bytes, every: float, limit: float) -> float | None:
    """Send ``data`` one byte every ``every`` s; seconds until the peer closed, or None."""
    started = time.monotonic()
    for byte in data:
        try:
            sock.send(bytes([byte]))
        except (BrokenPipeError, ConnectionResetError):
            return time.monotonic() - started
        if closed_by_peer(sock, every):
            return time.monotonic() - started
        if time.monotonic() - started > limit:
            break
    return None


def test_a_head_trickled_one_byte_a_second_is_cut_off(env: Env) -> None:
    sock = env.connect()
    try:
        after = trickle(sock, b"GET /v1/models HTTP/1.1\r\nhost: gateway\r\n\r\n", 1.0, 15)
    finally:
        sock.close()
    assert after is not None, "the trickled head was never cut off"
    assert HEAD_TIMEOUT - 0.5 <= after <= HEAD_TIMEOUT + 8
    assert env.served()


def test_a_connection_that_sends_nothing_is_closed(env: Env) -> None:
    sock = env.connect()
    started = time.monotonic()
    try:
        received, ended = read_to_end(sock, 15)
    finally:
        sock.close()
    assert (received, ended) == (b"", "eof")
    assert HEAD_TIMEOUT - 0.5 <= time.monotonic() - started <= HEAD_TIMEOUT + 8


def test_a_trickled_body_is_answered_400_body_timeout_and_the_connection_closed(env: Env) -> None:
    body = chat_body(stream=False, max_tokens=2)
    sock = env.connect()
    started = time.monotonic()
    try:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: gateway\r\n"
            b"authorization: Bearer " + TEST_KEY.encode() + b"\r\n"
            b"content-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)
        )
        for byte in body[:20]:  # 10 s worth: the deadline must come first
            readable, _, _ = select.select([sock], [], [], 0.5)
            if readable:
                break
            sock.send(bytes([byte]))
        received, ended = read_to_end(sock, 15)
    finally:
        sock.close()
    elapsed = time.monotonic() - started
    head, _, payload = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), received[:300]
    assert b"connection: close" in head.lower()
    assert orjson.loads(payload)["error"]["code"] == "body_timeout"
    assert ended in ("eof", "reset")  # closed: the rest of the body is not waited for
    assert BODY_TIMEOUT - 0.5 <= elapsed <= BODY_TIMEOUT + 8
    assert env.sim.requests(path="/v1/chat/completions") == []
    assert "body_timeout" in OPERATIONS.read_text()  # the documented answer


def test_an_oversized_head_is_refused_with_431(env: Env) -> None:
    sock = env.connect()
    try:
        sock.sendall(
            b"GET /v1/models HTTP/1.1\r\nhost: gateway\r\nx-big: "
            + b"a" * 2 * MAX_HEAD
            + b"\r\n\r\n"
        )
        received, ended = read_to_end(sock, 15)
    finally:
        sock.close()
    head, _, payload = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431"), received[:300]
    assert orjson.loads(payload)["error"]["type"] == "invalid_request_error"
    assert ended in ("eof", "reset")


def test_an_endless_header_line_is_refused_as_it_grows(env: Env) -> None:
    sock = env.connect()
    try:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nhost: gateway\r\nx-big: " + b"a" * 2 * MAX_HEAD)
        started = time.monotonic()
        readable, _, _ = select.select([sock], [], [], 10)
        received, _ = read_to_end(sock, 10) if readable else (b"", "timeout")
    finally:
        sock.close()
    # Refused while the line was still open, not merely dropped at the head timeout.
    assert received.startswith(b"HTTP/1.1 431"), received[:300]
    assert time.monotonic() - started < HEAD_TIMEOUT


def test_normal_requests_are_served_while_50_slow_heads_wait(env: Env) -> None:
    slow = [env.connect() for _ in range(50)]
    try:
        for sock in slow:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: gat")
        started = time.monotonic()
        for _ in range(5):
            assert env.served()
        assert time.monotonic() - started < HEAD_TIMEOUT + 5
        for sock in slow:
            assert closed_by_peer(sock, HEAD_TIMEOUT + 10), "a slow head was not cut off"
    finally:
        for sock in slow:
            sock.close()
