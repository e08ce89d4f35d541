"""Raw sockets, Prometheus text and polling with a deadline, for the robustness e2e tests.

The robustness tests need what an HTTP client library hides: a client that never
reads, a head sent one byte at a time, a socket closed mid-stream. Everything
here talks to 127.0.0.1 (or, where a test needs distinct clients, from the
address it names: 127.0.0.2, 127.0.0.3 …) and every wait is bounded.
"""

from __future__ import annotations

import os
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import httpx
import orjson
from prometheus_client.parser import text_string_to_metric_families
from tests.e2e.conftest import AUTH, TEST_KEY

from fairgate.server.process import GatewayProcess

T = TypeVar("T")

# Health checks every second, but patient: on a loaded machine an engine may answer
# its health check late, and a replica wrongly marked down refuses requests (503).
PATIENT_HEALTH = {"interval": "1s", "timeout": "5s"}


@contextmanager
def client_from(address: str, **headers: str) -> Iterator[httpx.Client]:
    """An HTTP client whose connections leave from ``address`` (a client network of its own)."""
    transport = httpx.HTTPTransport(local_address=address)
    with httpx.Client(transport=transport, headers=headers, timeout=20) as client:
        yield client


def idle_connection(gateway: GatewayProcess, address: str) -> socket.socket:
    """A connection from ``address`` that the gateway has accepted and served once, kept open."""
    sock = socket.create_connection(
        (gateway.host, gateway.port), timeout=20, source_address=(address, 0)
    )
    sock.sendall(
        b"GET /v1/models HTTP/1.1\r\nhost: g\r\nauthorization: "
        + AUTH["authorization"].encode()
        + b"\r\n\r\n"
    )
    answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    return sock


def until(check: Callable[[], T], timeout: float, what: str, interval: float = 0.1) -> T:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` past ``timeout``."""
    deadline = time.monotonic() + timeout
    last: T = check()
    while not last:
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g}s: {what} (last: {last!r})")
        time.sleep(interval)
        last = check()
    return last


def chat_body(*, stream: bool, max_tokens: int, model: str = "m", **extra: object) -> bytes:
    document = {
        "model": model,
        "messages": [{"role": "user", "content": "tell me a long story"}],
        "max_tokens": max_tokens,
        "stream": stream,
        **extra,
    }
    return orjson.dumps(document)


def connect(
    host: str, port: int, *, rcvbuf: int | None = None, mss: int | None = None
) -> socket.socket:
    """A connected TCP socket; ``rcvbuf``/``mss`` make it a client on a small, slow network.

    A loopback connection has a 64 KiB MSS, so the kernel queues megabytes toward a
    client that does not read; a 1400-byte MSS keeps that near a real network's.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    if mss is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, mss)
    sock.settimeout(30)
    try:
        sock.connect((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def post(sock: socket.socket, path: str, body: bytes, key: str = TEST_KEY) -> None:
    head = (
        f"POST {path} HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\n"
        f"authorization: Bearer {key}\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode()
    sock.sendall(head + body)


def read_until(sock: socket.socket, done: Callable[[bytes], bool], timeout: float) -> bytes:
    """Bytes from ``sock`` until ``done(received)``, the peer closes, or ``timeout`` s pass."""
    received = b""
    deadline = time.monotonic() + timeout
    while not done(received) and (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        if not chunk:
            break
        received += chunk
    return received


def answer_ended(answer: bytes) -> bool:
    """Whether ``answer`` holds a whole HTTP/1.1 answer (chunked, or with a length)."""
    head, sep, body = answer.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.lower() == b"content-length":
            return len(body) >= int(value)
    return body.endswith(b"0\r\n\r\n")


def read_to_end(sock: socket.socket, timeout: float) -> tuple[bytes, str]:
    """Everything until the connection ends: (bytes, "eof" | "reset" | "timeout")."""
    received = b""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return received, "timeout"
        except ConnectionResetError:
            return received, "reset"
        if not chunk:
            return received, "eof"
        received += chunk
    return received, "timeout"


def get(url: str, timeout: float = 10.0) -> tuple[int, bytes]:
    """GET ``url`` presenting the test key: (status, body), also for 4xx/5xx."""
    request = urllib.request.Request(url, headers={"authorization": f"Bearer {TEST_KEY}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def samples(text: str, name: str, **labels: str) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels`` (0.0 when none)."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                total += sample.value
    return total


def vm_rss_kib(pid: int) -> int:
    """Resident memory of process ``pid`` in KiB (Linux ``/proc``)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def holds_connection_from(pid: int, client: socket.socket) -> bool:
    """Whether process ``pid`` still has a socket open whose peer is ``client``'s end (Linux)."""
    client_port = client.getsockname()[1]
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                if int(fields[2].rsplit(":", 1)[1], 16) == client_port:
                    inodes.add(f"socket:[{fields[9]}]")
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                return True
        except FileNotFoundError:  # closed meanwhile
            continue
    return False


@contextmanager
def stderr_into(path: Path) -> Iterator[None]:
    """Child processes started inside write their stderr (the gateway's log) to ``path``."""
    saved = os.dup(2)
    with path.open("ab") as log:
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
