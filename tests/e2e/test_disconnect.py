"""A client that goes away frees the engine at once: no GPU keeps generating for nobody.

The simulated engine streams slowly (10 tokens/s), so a request it was not told
to abort would keep its KV blocks for a minute; its vLLM metrics show whether
the gateway's cancellation reached it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import pytest
from tests.e2e.conftest import model, write_config
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
from fairgate.sim.process import SimProcess

pytestmark = pytest.mark.slow

MAX_TOKENS = 600  # a minute at 10 tokens/s: only a cancellation ends it within the test


@dataclass(frozen=True, slots=True)
class Env:
    sim: SimProcess
    gateway: GatewayProcess

    def engine(self) -> tuple[float, float]:
        """The engine's (running requests, KV usage 0..1), from its vLLM metrics."""
        text = self.sim.metrics()
        return (
            samples(text, "vllm:num_requests_running"),
            samples(text, "vllm:kv_cache_usage_perc"),
        )

    def gateway_metric(self, name: str, **labels: str) -> float:
        status, body = get(self.gateway.admin_url + "/metrics")
        assert status == 200
        return samples(body.decode(), name, **labels)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with ExitStack() as stack:
        sim = stack.enter_context(SimProcess("--model", "m", "--speed", "10", "--ttft", "0.05"))
        config = write_config(
            tmp_path_factory.mktemp("gw"), [model("m", sim)], health=PATIENT_HEALTH
        )
        yield Env(sim, stack.enter_context(GatewayProcess(config)))


@pytest.fixture(autouse=True)
def _idle_engine(env: Env) -> None:
    until(lambda: env.engine() == (0.0, 0.0), 20, "the engine is idle before the test")
    env.sim.reset()


def engine_freed(env: Env) -> bool:
    return env.engine() == (0.0, 0.0) and env.sim.stats()["aborted"] == 1


def test_a_disconnect_mid_stream_frees_the_engines_kv(env: Env) -> None:
    aborts_before = env.gateway_metric("fairgate_stream_aborts_total", reason="client_disconnected")
    sock = connect(env.gateway.host, env.gateway.port)
    post(sock, "/v1/chat/completions", chat_body(stream=True, max_tokens=MAX_TOKENS))
    received = read_until(sock, lambda got: got.count(b"data: {") >= 4, timeout=30)
    assert received.startswith(b"HTTP/1.1 200"), received[:200]
    assert received.count(b"data: {") >= 4, "the stream did not start"
    running, kv = env.engine()
    assert running == 1 and kv > 0  # the engine holds KV blocks for the stream
    assert env.gateway_metric("fairgate_upstream_in_flight", model="m") == 1

    sock.close()
    closed = time.monotonic()
    until(lambda: engine_freed(env), 15, "running and KV usage back to 0, one abort")
    assert time.monotonic() - closed < 15  # well before the minute the stream had left
    stats = env.sim.stats()
    assert stats["finished"] == 0
    assert stats["generation_tokens_total"] < MAX_TOKENS
    until(
        lambda: env.gateway_metric("fairgate_upstream_in_flight", model="m") == 0,
        10,
        "the gateway's in-flight count is back to 0",
    )
    assert (
        env.gateway_metric("fairgate_stream_aborts_total", reason="client_disconnected")
        == aborts_before + 1
    )


def test_a_client_abandoning_a_plain_request_frees_the_engine(env: Env) -> None:
    abandoned_before = env.gateway_metric("fairgate_requests_total", model="m", status="499")
    sock = connect(env.gateway.host, env.gateway.port)
    post(sock, "/v1/chat/completions", chat_body(stream=False, max_tokens=MAX_TOKENS))
    until(lambda: env.engine()[0] == 1, 20, "the engine is generating the answer")
    assert env.engine()[1] > 0

    sock.close()
    until(lambda: engine_freed(env), 15, "running and KV usage back to 0, one abort")
    assert env.sim.stats()["finished"] == 0
    until(
        lambda: (
            env.gateway_metric("fairgate_requests_total", model="m", status="499")
            == abandoned_before + 1
        ),
        10,
        "the abandoned request counted with status 499",
    )


def test_the_gateway_serves_the_next_request_normally(env: Env) -> None:
    sock = connect(env.gateway.host, env.gateway.port)
    post(sock, "/v1/chat/completions", chat_body(stream=True, max_tokens=3))
    received = read_until(sock, lambda got: b"data: [DONE]" in got, timeout=30)
    sock.close()
    assert b"data: [DONE]" in received
    assert until(lambda: env.sim.stats()["finished"] == 1, 10, "the engine finished it")
