"""Client addresses through a trusted proxy, and route classes by network, on real gateways.

Callers bind their sockets to distinct loopback addresses: 127.0.0.2 plays the
operator's reverse proxy (in ``trusted_proxies``), 127.0.0.3 a client that
connects directly and forges ``X-Forwarded-For``. What the gateway believed is
read back from the store (the usage record's ``client_addr``, on SQLite and
PostgreSQL) and from its answers (the failure limiter, the route classes).
A network namespace with a veth pair provides a caller that is not on
loopback at all, for the default rule of metrics and health.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import sqlalchemy as sa
from tests.e2e.conftest import AUTH, StartSim, model, write_config
from tests.e2e.robust_wire import PATIENT_HEALTH, client_from, idle_connection, until

from fairgate.auth.secrets import new_key
from fairgate.config import load_config
from fairgate.server.process import GatewayProcess
from fairgate.store import tables
from fairgate.tenancy import open_tenancy

pytestmark = pytest.mark.slow

PROXY = "127.0.0.2"
DIRECT = "127.0.0.3"
MASTER = "master-key-client-addr-0123456789abcdef"
METRICS_TOKEN = "metrics-token-client-addr-0123456789"
FORBIDDEN = {"error": {"message": "forbidden", "type": "permission_error", "code": "forbidden"}}


def chat(client: httpx.Client, gateway: GatewayProcess, **headers: str) -> httpx.Response:
    return client.post(
        gateway.url + "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        headers=headers,
    )


def client_addrs(config: Path) -> dict[str, str | None]:
    """Every usage record's client_addr by request id, read from the store."""

    async def read() -> dict[str, str | None]:
        async with open_tenancy(load_config(config)) as tenancy, tenancy.store.read() as conn:
            query = sa.select(tables.usage_records.c.request_id, tables.usage_records.c.client_addr)
            return {row[0]: row[1] for row in (await conn.execute(query)).all()}

    return asyncio.run(read())


def test_the_usage_record_keeps_the_client_behind_the_proxy_and_ignores_forged_headers(
    tmp_path: Path, start_sim: StartSim, store: dict[str, str]
) -> None:
    sim = start_sim("--model", "m", "--speed", "0")
    config = write_config(
        tmp_path,
        [model("m", sim)],
        store=store,
        health=PATIENT_HEALTH,
        trusted_proxies=[f"{PROXY}/32"],
        limits={"max_connections_per_network": 1},
    )
    with GatewayProcess(config) as gateway, ExitStack() as held:
        with client_from(PROXY, **AUTH) as proxy, client_from(DIRECT, **AUTH) as direct:
            behind = chat(proxy, gateway, **{"x-forwarded-for": "10.9.9.9, 127.0.0.5"})
            forged = chat(direct, gateway, **{"x-forwarded-for": "1.2.3.4"})
            plain = chat(proxy, gateway)
        for answer in (behind, forged, plain):
            assert answer.status_code == 200, answer.text
        ids = {
            "behind": behind.headers["x-request-id"],
            "forged": forged.headers["x-request-id"],
            "plain": plain.headers["x-request-id"],
        }
        until(
            lambda: set(ids.values()) <= set(client_addrs(config)),
            15,
            "the three usage records written",
            0.3,
        )
        stored = client_addrs(config)
        assert stored[ids["behind"]] == "127.0.0.5"  # never the leftmost 10.9.9.9
        assert stored[ids["forged"]] == DIRECT  # an untrusted caller's header is ignored
        assert stored[ids["plain"]] == PROXY  # the proxy sent no header: it is the client

        # The proxy carries many clients: the per-network cap of one does not apply to
        # it, while a direct client still gets only its one connection.
        for _ in range(3):
            held.callback(idle_connection(gateway, PROXY).close)
        held.callback(idle_connection(gateway, DIRECT).close)
        with client_from(DIRECT, **AUTH) as direct:
            over = direct.get(gateway.url + "/v1/models")
        assert over.status_code == 503
        assert over.json()["error"]["code"] == "too_many_connections_from_network"


def test_bad_keys_through_the_proxy_lock_out_their_client_not_its_neighbours(
    tmp_path: Path, start_sim: StartSim
) -> None:
    sim = start_sim("--model", "m", "--speed", "0")
    config = write_config(
        tmp_path,
        [model("m", sim)],
        health=PATIENT_HEALTH,
        trusted_proxies=[f"{PROXY}/32"],
        auth={"failures_per_minute": 3},
    )
    bad = {"authorization": f"Bearer {new_key()[0]}"}  # shaped like a key, in no store
    with GatewayProcess(config) as gateway, client_from(PROXY) as proxy:
        x = {**bad, "x-forwarded-for": "198.51.100.7"}
        codes = [proxy.get(gateway.url + "/v1/models", headers=x).status_code for _ in range(5)]
        assert codes == [401, 401, 401, 429, 429]
        # another client behind the same proxy: its own count, untouched
        y = {**bad, "x-forwarded-for": "198.51.100.8"}
        assert proxy.get(gateway.url + "/v1/models", headers=y).status_code == 401
        # X cannot shed its count by writing another address left of its own
        spoof = {**bad, "x-forwarded-for": "198.51.100.8, 198.51.100.7"}
        assert proxy.get(gateway.url + "/v1/models", headers=spoof).status_code == 429
        # the proxy itself (no header) and a direct caller are other clients too
        assert proxy.get(gateway.url + "/v1/models", headers=bad).status_code == 401
        with client_from(DIRECT) as direct:
            assert direct.get(gateway.url + "/v1/models", headers=bad).status_code == 401
        # a valid key of the locked-out client is still served
        ok = {**AUTH, "x-forwarded-for": "198.51.100.7"}
        assert proxy.get(gateway.url + "/v1/models", headers=ok).status_code == 200


def test_route_classes_refuse_by_network_and_the_metrics_token_opens_metrics(
    tmp_path: Path, start_sim: StartSim
) -> None:
    sim = start_sim("--model", "m", "--speed", "0")
    (tmp_path / "master.key").write_text(MASTER + "\n")
    (tmp_path / "metrics.token").write_text(METRICS_TOKEN + "\n")
    config = write_config(
        tmp_path,
        [model("m", sim)],
        health=PATIENT_HEALTH,
        master_key_file="master.key",
        metrics_token_file="metrics.token",
        trusted_proxies=[f"{PROXY}/32"],
        routes={
            "metrics": {"allow": ["127.0.0.1/32"]},
            "inference": {"allow": ["127.0.0.1/32", f"{PROXY}/32", "127.0.0.5/32"]},
        },
    )
    with GatewayProcess(config) as gateway, client_from(PROXY) as other:
        metrics = gateway.admin_url + "/metrics"
        refused = other.get(metrics)
        assert refused.status_code == 403 and refused.json() == FORBIDDEN
        assert "metrics" not in refused.text and "127.0.0.1" not in refused.text
        token = {"authorization": f"Bearer {METRICS_TOKEN}"}
        scraped = other.get(metrics, headers=token)
        assert scraped.status_code == 200 and "fairgate_requests_total" in scraped.text
        wrong = other.get(metrics, headers={"authorization": "Bearer nope"})
        assert wrong.status_code == 401 and METRICS_TOKEN not in wrong.text
        assert httpx.get(metrics, timeout=20).status_code == 200  # 127.0.0.1, no token

        # the OpenAPI document needs an admin credential, from anywhere
        openapi = gateway.admin_url + "/admin/openapi.json"
        assert other.get(openapi).status_code == 401
        assert httpx.get(openapi, timeout=20).status_code == 401
        master = {"authorization": f"Bearer {MASTER}"}
        document = other.get(openapi, headers=master)
        assert document.status_code == 200 and "/admin/keys" in document.json()["paths"]

        # inference by the resolved address: the proxy's client 127.0.0.5 may call,
        # 127.0.0.9 behind the same proxy may not, nor may 127.0.0.3 directly
        models = gateway.url + "/v1/models"
        through = {**AUTH, "x-forwarded-for": "127.0.0.5"}
        assert other.get(models, headers=through).status_code == 200
        outside = other.get(models, headers={**AUTH, "x-forwarded-for": "127.0.0.9"})
        assert outside.status_code == 403 and outside.json() == FORBIDDEN
        with client_from(DIRECT) as direct:
            # refused before authentication: no key needed to be told, none leaked
            assert direct.get(models, headers=AUTH).json() == FORBIDDEN
            assert direct.get(models).status_code == 403
        # refused from the head: a body announced and never sent is not waited for
        answer = head_only(gateway, DIRECT, "/v1/chat/completions", 100_000_000)
        assert answer.startswith(b"HTTP/1.1 403 "), answer[:200]
        assert b"connection: close" in answer.lower()
        assert answer.endswith(orjson.dumps(FORBIDDEN))


def head_only(gateway: GatewayProcess, address: str, path: str, length: int) -> bytes:
    """The whole answer to a POST whose head announces ``length`` bytes of body, none sent
    (the socket's timeout fails the test if the gateway waits for the body)."""
    with socket.create_connection(
        (gateway.host, gateway.port), timeout=10, source_address=(address, 0)
    ) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nhost: g\r\ncontent-type: application/json\r\n"
            f"authorization: {AUTH['authorization']}\r\n"
            f"content-length: {length}\r\n\r\n".encode()
        )
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def _run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=30)


@contextmanager
def namespace_peer() -> Iterator[tuple[str, str, str]]:
    """A network namespace joined to this host by a veth pair: (namespace, host side
    address, namespace side address), all removed afterwards."""
    tag = os.urandom(3).hex()
    name, host_if, ns_if = f"fgtest-{tag}", f"fgh{tag}", f"fgn{tag}"
    octet = int(tag[:2], 16)
    host_addr, ns_addr = f"10.213.{octet}.1", f"10.213.{octet}.2"
    try:
        _run("ip", "netns", "add", name)
        _run("ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        _run("ip", "link", "set", ns_if, "netns", name)
        _run("ip", "addr", "add", f"{host_addr}/30", "dev", host_if)
        _run("ip", "link", "set", host_if, "up")
        _run("ip", "netns", "exec", name, "ip", "addr", "add", f"{ns_addr}/30", "dev", ns_if)
        _run("ip", "netns", "exec", name, "ip", "link", "set", ns_if, "up")
        _run("ip", "netns", "exec", name, "ip", "link", "set", "lo", "up")
        yield name, host_addr, ns_addr
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


def curl_in(namespace: str, url: str, *headers: str) -> tuple[int, str]:
    """(status, body) of a GET sent from inside ``namespace``."""
    args = ["ip", "netns", "exec", namespace, "curl", "-sS", "-m", "10", "-w", "\n%{http_code}"]
    for header in headers:
        args += ["-H", header]
    done = subprocess.run([*args, url], capture_output=True, text=True, timeout=30, check=True)
    body, _, status = done.stdout.rpartition("\n")
    return int(status), body


def _can_make_namespaces() -> bool:
    return (
        os.geteuid() == 0 and subprocess.run(["which", "ip"], capture_output=True).returncode == 0
    )


@pytest.mark.skipif(not _can_make_namespaces(), reason="needs root and iproute2")
def test_metrics_and_health_refuse_a_caller_off_loopback_by_default(
    tmp_path: Path, start_sim: StartSim
) -> None:
    sim = start_sim("--model", "m", "--speed", "0")
    (tmp_path / "master.key").write_text(MASTER + "\n")
    with namespace_peer() as (namespace, host_addr, _):
        config = write_config(
            tmp_path,
            [model("m", sim)],
            health=PATIENT_HEALTH,
            master_key_file="master.key",
            admin_listen={"host": "0.0.0.0", "port": 0},
        )
        with GatewayProcess(config) as gateway:
            port = gateway.admin_url.rsplit(":", 1)[1]
            base = f"http://{host_addr}:{port}"
            for path in ("/metrics", "/healthz", "/readyz"):
                status, body = curl_in(namespace, base + path)
                assert (status, body) == (403, _json(FORBIDDEN)), (path, status, body)
            # the same listener answers the namespace's admin caller: the class rule, not
            # reachability, refused the others
            status, body = curl_in(
                namespace, base + "/admin/whoami", f"authorization: Bearer {MASTER}"
            )
            assert status == 200, body
            # and loopback is served by default
            local = f"http://127.0.0.1:{port}"
            assert httpx.get(local + "/healthz", timeout=20).status_code == 200
            assert httpx.get(local + "/metrics", timeout=20).status_code == 200


def _json(document: dict[str, Any]) -> str:
    return orjson.dumps(document).decode()
