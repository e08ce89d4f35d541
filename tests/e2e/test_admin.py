"""The admin listener: liveness, readiness that follows the replicas' health, and metrics.

``/healthz`` says the process runs; ``/readyz`` says whether it can serve every
configured model (a load balancer's signal); ``/metrics`` is what an operator's
Prometheus scrapes. Health checks run every second here.
"""

from __future__ import annotations

import orjson
import pytest
from tests.e2e.conftest import StartGateway, StartSim, model
from tests.e2e.robust_wire import (
    PATIENT_HEALTH,
    chat_body,
    connect,
    get,
    post,
    read_until,
    samples,
    until,
)

from fairgate.server.process import GatewayProcess

pytestmark = pytest.mark.slow

FAMILIES = (
    "fairgate_requests",
    "fairgate_request_duration_seconds",
    "fairgate_ttft_seconds",
    "fairgate_tokens",
    "fairgate_upstream_retries",
    "fairgate_upstream_errors",
    "fairgate_upstream_healthy",
    "fairgate_upstream_in_flight",
    "fairgate_upstream_breaker_open",
    "fairgate_stream_aborts",
    "fairgate_overhead_seconds",
)


def metric(gateway: GatewayProcess, name: str, **labels: str) -> float:
    status, body = get(gateway.admin_url + "/metrics")
    assert status == 200
    return samples(body.decode(), name, **labels)


def readiness(gateway: GatewayProcess) -> tuple[int, dict[str, bool]]:
    status, body = get(gateway.admin_url + "/readyz")
    return status, orjson.loads(body)["models"]


def test_readyz_follows_the_health_of_each_models_replicas(
    start_sim: StartSim, start_gateway: StartGateway
) -> None:
    first, second = (
        start_sim("--model", "m", "--speed", "0"),
        start_sim("--model", "m", "--speed", "0"),
    )
    other = start_sim("--model", "n", "--speed", "0")
    gateway = start_gateway([model("m", first, second), model("n", other)], health=PATIENT_HEALTH)
    assert get(gateway.admin_url + "/healthz") == (
        200,
        b'{"status":"ok","state":{"backend":"memory","available":true}}',
    )
    until(lambda: readiness(gateway) == (200, {"m": True, "n": True}), 15, "ready")

    first.stop()  # m keeps one healthy replica: still ready
    until(
        lambda: metric(gateway, "fairgate_upstream_healthy", model="m", replica="r0") == 0,
        15,
        "the stopped replica marked unhealthy",
    )
    assert readiness(gateway) == (200, {"m": True, "n": True})

    second.stop()  # no replica of m passes its health check
    until(lambda: readiness(gateway) == (503, {"m": False, "n": True}), 15, "not ready")
    assert get(gateway.admin_url + "/healthz")[0] == 200  # alive, only not ready


def test_metrics_expose_every_family_and_in_flight_rises_during_a_stream(
    start_sim: StartSim, start_gateway: StartGateway
) -> None:
    sim = start_sim("--model", "m", "--speed", "10", "--ttft", "0")
    gateway = start_gateway([model("m", sim)], health=PATIENT_HEALTH)
    sock = connect(gateway.host, gateway.port)
    try:
        post(sock, "/v1/chat/completions", chat_body(stream=True, max_tokens=20))  # about 2 s
        read_until(sock, lambda got: b"data: {" in got, timeout=30)
        assert metric(gateway, "fairgate_upstream_in_flight", model="m", replica="r0") == 1
        assert metric(gateway, "fairgate_streams_open") == 1
        read_until(sock, lambda got: b"data: [DONE]" in got, timeout=30)
    finally:
        sock.close()
    until(
        lambda: metric(gateway, "fairgate_upstream_in_flight", model="m") == 0,
        10,
        "in flight back to 0 once the stream ended",
    )
    assert metric(gateway, "fairgate_streams_open") == 0

    status, body = get(gateway.admin_url + "/metrics")
    text = body.decode()
    assert status == 200
    types = {
        line.split()[2].removesuffix("_total")
        for line in text.splitlines()
        if line.startswith("# TYPE ")
    }
    missing = [name for name in FAMILIES if name not in types]
    assert missing == []
    assert samples(text, "fairgate_requests_total", model="m", status="200") == 1
    assert samples(text, "fairgate_tokens_total", model="m", kind="completion") == 20
    assert samples(text, "fairgate_ttft_seconds_count", model="m") == 1
    assert samples(text, "fairgate_request_duration_seconds_count", model="m") == 1
    assert samples(text, "fairgate_overhead_seconds_count") == 1
    assert samples(text, "fairgate_upstream_healthy", model="m", replica="r0") == 1
