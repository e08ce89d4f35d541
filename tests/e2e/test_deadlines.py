"""Each upstream deadline fires with the right status, and a stream it cuts ends cleanly.

``short`` has connect 1 s and headers, first-token and idle deadlines of 2 s
(total 60 s, no retries); ``total`` has a 2 s total deadline and 30 s for the
others, with a second replica to show a spent total is not retried. The
simulator's stall faults hold the engine back; a stopped simulator refuses
connections; a listening socket whose accept queue is full leaves a connect
hanging on loopback (its SYNs are dropped), which is how a connect timeout is
provoked without a blackhole route.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.e2e.conftest import AUTH, HEAVIEST_FIRST, model, write_config
from tests.e2e.raw_client import check_error

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess

pytestmark = pytest.mark.slow

CHAT = "/v1/chat/completions"


def chat(stream: bool, model_name: str = "m") -> dict[str, Any]:
    return {
        "model": model_name,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 5,
        "stream": stream,
    }


@dataclass(frozen=True, slots=True)
class Env:
    sim: SimProcess  # replica of m on both gateways (weight 2: tried first)
    spare: SimProcess  # m's second replica on the total gateway
    doomed: SimProcess  # stopped in a test: refuses connections
    hole: SimProcess  # stopped in a test, its port then taken by a full accept queue
    short: GatewayProcess
    total: GatewayProcess


def start_all(stack: ExitStack, processes: list[Any]) -> None:
    for process in processes:
        stack.callback(process.stop)
    with ThreadPoolExecutor(len(processes)) as pool:
        list(pool.map(lambda p: p.start(), processes))


def until(check: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout:g}s: {what}"
        time.sleep(0.05)


def metric(gateway: GatewayProcess, name: str, **labels: str) -> float:
    text = httpx.get(gateway.admin_url + "/metrics", timeout=30).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with ExitStack() as stack:
        sims = [SimProcess("--speed", "0", "--model", "m") for _ in range(4)]
        start_all(stack, sims)
        sim, spare, doomed, hole = sims
        quiet: dict[str, Any] = {
            "health": {"interval": "1h", "timeout": "5s"},
            "breaker": {"failures": 100},
        }
        short = write_config(
            tmp_path_factory.mktemp("short"),
            [
                model("m", sim),
                model("gone", doomed, engine="openai", upstream_model="m"),
                model("hole", hole, engine="openai", upstream_model="m"),
            ],
            limits={
                "connect_timeout": "1s",
                "headers_timeout": "2s",
                "first_token_timeout": "2s",
                "idle_timeout": "2s",
                "total_timeout": "60s",
            },
            proxy={"retries": 0},
            **quiet,
        )
        total = write_config(
            tmp_path_factory.mktemp("total"),
            [
                model(
                    "m",
                    upstreams=[
                        {"name": "r0", "url": sim.url, "weight": 2},
                        {"name": "r1", "url": spare.url},
                    ],
                    routing=HEAVIEST_FIRST,
                )
            ],
            limits={
                "headers_timeout": "30s",
                "first_token_timeout": "30s",
                "idle_timeout": "30s",
                "total_timeout": "2s",
            },
            proxy={"retries": 2},
            **quiet,
        )
        gateways = [GatewayProcess(short), GatewayProcess(total)]
        start_all(stack, gateways)
        yield Env(sim, spare, doomed, hole, *gateways)


@pytest.fixture(autouse=True)
def _fresh(env: Env) -> None:
    env.sim.reset()
    env.spare.reset()


def timed_post(url: str, body: dict[str, Any]) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    answer = httpx.post(url, json=body, timeout=60, headers=AUTH)
    return answer, time.monotonic() - started


def events_of(answer: httpx.Response) -> list[dict[str, Any]]:
    chunks = [e for e in answer.content.split(b"\n\n") if e]
    assert b"data: [DONE]" not in chunks
    return [orjson.loads(e.removeprefix(b"data: ")) for e in chunks]


def assert_cut_after_tokens(answer: httpx.Response, tokens: int) -> None:
    """A 200 stream with ``tokens`` content events, then an error event, no [DONE]."""
    assert answer.status_code == 200
    events = events_of(answer)  # httpx read it to the end: the chunked body was terminated
    content = [e for e in events if e.get("choices") and e["choices"][0]["delta"].get("content")]
    assert len(content) == tokens
    assert set(events[-1]) == {"error"} and events[-1]["error"]["message"]


def test_refused_connection_is_502(env: Env) -> None:
    until(lambda: bool(env.doomed.requests(path="/v1/models")), "first health check")
    env.doomed.stop()
    answer, _ = timed_post(env.short.url + CHAT, chat(False, "gone"))
    check_error(answer.status_code, answer.headers.get("x-request-id"), answer.content, 502)
    assert metric(env.short, "fairgate_upstream_errors_total", reason="connect_error") == 1


def test_connect_timeout_is_504(env: Env) -> None:
    until(lambda: bool(env.hole.requests(path="/v1/models")), "first health check")
    port = env.hole.port
    env.hole.stop()
    with ExitStack() as stack:
        listener = stack.enter_context(socket.socket())
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(0)
        for _ in range(3):  # fill the accept queue; later SYNs are dropped
            filler = stack.enter_context(socket.socket())
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
        answer, elapsed = timed_post(env.short.url + CHAT, chat(False, "hole"))
    error = check_error(answer.status_code, answer.headers.get("x-request-id"), answer.content, 504)
    assert "reach" in error["message"]
    assert elapsed >= 1.0
    assert metric(env.short, "fairgate_upstream_errors_total", reason="connect_timeout") == 1


def test_headers_timeout_is_504(env: Env) -> None:
    env.sim.faults(stall_before_headers=30)
    answer, elapsed = timed_post(env.short.url + CHAT, chat(False))
    check_error(answer.status_code, answer.headers.get("x-request-id"), answer.content, 504)
    assert 2.0 <= elapsed < 30.0
    assert metric(env.short, "fairgate_upstream_errors_total", reason="headers_timeout") >= 1


def test_first_token_timeout_is_504_before_anything_was_sent(env: Env) -> None:
    env.sim.faults(stall_before_first_token=30)
    answer, elapsed = timed_post(env.short.url + CHAT, chat(True))
    check_error(answer.status_code, answer.headers.get("x-request-id"), answer.content, 504)
    assert 2.0 <= elapsed < 30.0
    assert metric(env.short, "fairgate_upstream_errors_total", reason="first_token_timeout") == 1


def test_idle_timeout_cuts_the_stream_with_an_error_event(env: Env) -> None:
    env.sim.faults(stall_mid_stream=30, stall_mid_stream_after=2)
    answer, elapsed = timed_post(env.short.url + CHAT, chat(True))
    assert_cut_after_tokens(answer, 2)
    assert 2.0 <= elapsed < 30.0
    assert metric(env.short, "fairgate_stream_aborts_total", reason="idle_timeout") == 1


def test_total_timeout_before_headers_is_504_and_not_retried(env: Env) -> None:
    env.sim.faults(stall_before_headers=30)
    answer, elapsed = timed_post(env.total.url + CHAT, chat(False))
    check_error(answer.status_code, answer.headers.get("x-request-id"), answer.content, 504)
    assert 2.0 <= elapsed < 30.0
    assert env.spare.requests() == []  # no time is left for another replica


def test_total_timeout_mid_stream_truncates(env: Env) -> None:
    env.sim.faults(stall_mid_stream=30, stall_mid_stream_after=2)
    answer, elapsed = timed_post(env.total.url + CHAT, chat(True))
    assert_cut_after_tokens(answer, 2)
    assert 2.0 <= elapsed < 30.0
    assert metric(env.total, "fairgate_stream_aborts_total", reason="total_timeout") == 1
    assert env.spare.requests() == []
