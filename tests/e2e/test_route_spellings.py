"""Route classes against path spellings, methods and IPv4-mapped peers, on a real gateway.

The gateway listens dual-stack (``::``), so an IPv4 client arrives as
``::ffff:a.b.c.d``. Metrics, health and admin routes answer 127.0.0.1 only;
127.0.0.3 tries every spelling a router, a proxy or a normaliser might read as
``/metrics``, ``/healthz`` or ``/admin/openapi.json`` (doubled and trailing
slashes, case, percent escapes, dot segments, an absolute URI, ``*``) with HEAD,
OPTIONS and POST too, and always gets the same 403 bytes; 127.0.0.1, arriving
IPv4-mapped as well, is served, so the refusals are the rule's and not the
listener's. And 127.0.0.1, when it is no trusted proxy, forwards nothing: the
HTTP server's own proxy-header handling (uvicorn's, on by default for loopback)
stays off.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from tests.e2e.conftest import StartGateway, StartSim, model, write_config
from tests.e2e.robust_wire import PATIENT_HEALTH

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess

pytestmark = pytest.mark.slow

ALLOWED = "127.0.0.1"
OUTSIDE = "127.0.0.3"
PROXY = "127.0.0.2"
MASTER = "master-key-route-spellings-0123456789"
FORBIDDEN = orjson.dumps(
    {"error": {"message": "forbidden", "type": "permission_error", "code": "forbidden"}}
)
SPELLINGS = [
    "/metrics",
    "//metrics",
    "/metrics/",
    "/METRICS",
    "/%2Fmetrics",
    "/%6detrics",
    "/metrics?x=1",
    "/./metrics",
    "/a/../metrics",
    "/metrics%00",
    "/metrics;x",
    "/metrics%20",
    "http://gateway/metrics",
    "*",
    "/healthz",
    "//healthz",
    "/readyz/",
    "/admin/openapi.json",
    "//admin/openapi.json",
    "/admin/openapi.json/",
]


@dataclass(frozen=True, slots=True)
class Ports:
    client: int
    admin: int


@pytest.fixture(scope="module")
def ports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ports]:
    directory: Path = tmp_path_factory.mktemp("spellings")
    (directory / "master.key").write_text(MASTER + "\n")
    with ExitStack() as stack:
        sim = stack.enter_context(SimProcess("--model", "m", "--speed", "0"))
        only = {"allow": [f"{ALLOWED}/32"]}
        config = write_config(
            directory,
            [model("m", sim)],
            health=PATIENT_HEALTH,
            listen={"host": "::", "port": 0},
            admin_listen={"host": "::", "port": 0},
            master_key_file="master.key",
            trusted_proxies=[f"{PROXY}/32"],
            routes={"metrics": only, "health": only, "admin": only, "inference": only},
        )
        gateway = stack.enter_context(GatewayProcess(config))
        yield Ports(int(gateway.url.rsplit(":", 1)[1]), int(gateway.admin_url.rsplit(":", 1)[1]))


def exchange(port: int, source: str, head: str, *, mapped: bool) -> bytes:
    """The whole answer to one request (``connection: close``) from ``source``, over
    IPv4 or as an IPv4-mapped IPv6 peer."""
    family = socket.AF_INET6 if mapped else socket.AF_INET
    prefix = "::ffff:" if mapped else ""
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(20)
        sock.bind((prefix + source, 0))
        sock.connect((prefix + ALLOWED, port))
        sock.sendall(head.encode("latin-1") + b"connection: close\r\n\r\n")
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def status_and_body(answer: bytes) -> tuple[bytes, bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0], body


@pytest.mark.parametrize("mapped", [False, True], ids=["ipv4", "mapped"])
@pytest.mark.parametrize("method", ["GET", "HEAD", "OPTIONS", "POST"])
def test_no_spelling_or_method_of_a_restricted_route_answers_outside_its_network(
    ports: Ports, method: str, mapped: bool
) -> None:
    for path in SPELLINGS:
        head = (
            f"{method} {path} HTTP/1.1\r\nhost: g\r\nauthorization: Bearer {MASTER}\r\n"
            "content-length: 0\r\n"
        )
        status, body = status_and_body(exchange(ports.admin, OUTSIDE, head, mapped=mapped))
        assert status == b"HTTP/1.1 403 Forbidden", (path, status)
        if method != "HEAD":
            assert body == FORBIDDEN, path


@pytest.mark.parametrize("mapped", [False, True], ids=["ipv4", "mapped"])
def test_the_allowed_address_is_served_however_it_arrives(ports: Ports, mapped: bool) -> None:
    for path in ("/metrics", "/healthz"):
        status, _ = status_and_body(
            exchange(ports.admin, ALLOWED, f"GET {path} HTTP/1.1\r\nhost: g\r\n", mapped=mapped)
        )
        assert status == b"HTTP/1.1 200 OK", path
    # the proxy, itself arriving IPv4-mapped, is trusted: its client is the one it names
    forwarded = f"GET /metrics HTTP/1.1\r\nhost: g\r\nx-forwarded-for: {ALLOWED}\r\n"
    assert status_and_body(exchange(ports.admin, PROXY, forwarded, mapped=mapped))[0].endswith(
        b"200 OK"
    )
    forged = f"GET /metrics HTTP/1.1\r\nhost: g\r\nx-forwarded-for: {ALLOWED}\r\n"
    assert status_and_body(exchange(ports.admin, OUTSIDE, forged, mapped=mapped))[0].endswith(
        b"403 Forbidden"
    )


@pytest.mark.parametrize("mapped", [False, True], ids=["ipv4", "mapped"])
def test_answers_the_gateway_gives_itself_are_refused_outside_the_inference_network(
    ports: Ports, mapped: bool
) -> None:
    for path in ("/v1/models", "/me", "/no-such-route", "//v1/models", "/V1/models", "/metrics"):
        head = f"GET {path} HTTP/1.1\r\nhost: g\r\nauthorization: Bearer fg-anything\r\n"
        status, body = status_and_body(exchange(ports.client, OUTSIDE, head, mapped=mapped))
        assert (status, body) == (b"HTTP/1.1 403 Forbidden", FORBIDDEN), path


def test_a_loopback_peer_that_is_no_trusted_proxy_forwards_nothing(
    start_sim: StartSim, start_gateway: StartGateway
) -> None:
    # uvicorn's own proxy-header handling, on by default for 127.0.0.1 on an IPv4
    # listener, would take the forwarded address as the client
    sim = start_sim("--model", "m", "--speed", "0")
    gateway = start_gateway(
        [model("m", sim)],
        health=PATIENT_HEALTH,
        trusted_proxies=[f"{PROXY}/32"],
        routes={"metrics": {"allow": [f"{ALLOWED}/32"]}},
    )
    port = int(gateway.admin_url.rsplit(":", 1)[1])
    forwarded = f"GET /metrics HTTP/1.1\r\nhost: g\r\nx-forwarded-for: {OUTSIDE}\r\n"
    status, _ = status_and_body(exchange(port, ALLOWED, forwarded, mapped=False))
    assert status == b"HTTP/1.1 200 OK"
