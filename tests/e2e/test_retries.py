"""Retries go to another replica only while nothing reached the client; fallbacks to the next model.

Five simulators serve the models of two gateways:

- ``gw`` (``retries: 2``): ``m`` on s0 (weight 2, so always tried first) and
  s1; ``wide`` on all of s0..s3; ``a`` on s2 falling back to ``b`` on s3;
  ``gone`` (generic OpenAI kind) on ``doomed`` (weight 2) and s1.
- ``strict`` (``retries: 0``, breaker opens after one failure): ``m`` as
  above, ``a``→``b`` as above, ``solo`` on s1.

Which simulator recorded a request shows where each attempt went.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import orjson
import pytest
from openai.types.chat import ChatCompletionMessageParam
from prometheus_client.parser import text_string_to_metric_families
from tests.e2e.conftest import AUTH, HEAVIEST_FIRST, TEST_KEY, model, write_config
from tests.e2e.raw_client import check_error

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import ServerProcess, SimProcess

pytestmark = pytest.mark.slow

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
CHAT = "/v1/chat/completions"


@dataclass(frozen=True, slots=True)
class Env:
    s: list[SimProcess]
    doomed: SimProcess
    gw: GatewayProcess
    strict: GatewayProcess

    def recorded(self) -> list[int]:
        """How many chat requests each of s0..s3 received."""
        return [len(sim.requests(path=CHAT)) for sim in self.s]


def client(gateway: GatewayProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=TEST_KEY, max_retries=0)


def metric(gateway: GatewayProcess, name: str, **labels: str) -> float:
    text = httpx.get(gateway.admin_url + "/metrics", timeout=30).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


def start_all(stack: ExitStack, processes: list[Any]) -> None:
    """Start the processes side by side; each is stopped when ``stack`` closes."""
    for process in processes:
        stack.callback(process.stop)
    with ThreadPoolExecutor(len(processes)) as pool:
        list(pool.map(lambda p: p.start(), processes))


def until(check: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout:g}s: {what}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with ExitStack() as stack:
        args = ("--speed", "0", "--model", "m", "--model", "a", "--model", "b")
        sims = [SimProcess(*args) for _ in range(4)]
        doomed = SimProcess(*args)
        start_all(stack, [*sims, doomed])
        s0, s1, s2, s3 = sims
        m = model(
            "m",
            upstreams=[{"name": "s0", "url": s0.url, "weight": 2}, {"name": "s1", "url": s1.url}],
            routing=HEAVIEST_FIRST,
        )
        a = model("a", s2, fallbacks=["b"])
        b = model("b", s3)
        common: dict[str, Any] = {"health": {"interval": "1h", "timeout": "5s"}}
        gw_config = write_config(
            tmp_path_factory.mktemp("gw"),
            [
                m,
                a,
                b,
                model("wide", *sims, upstream_model="m"),
                model(
                    "gone",
                    engine="openai",
                    upstream_model="m",
                    upstreams=[
                        {"name": "doomed", "url": doomed.url, "weight": 2},
                        {"name": "s1", "url": s1.url},
                    ],
                    routing=HEAVIEST_FIRST,
                ),
            ],
            proxy={"retries": 2},
            breaker={"failures": 100},
            limits={"headers_timeout": "2s", "idle_timeout": "20s"},
            **common,
        )
        strict_config = write_config(
            tmp_path_factory.mktemp("strict"),
            [m, a, b, model("solo", s1, upstream_model="m")],
            proxy={"retries": 0},
            breaker={"failures": 1, "backoff_initial": "60s", "backoff_max": "60s"},
            **common,
        )
        gateways: list[ServerProcess] = [GatewayProcess(gw_config), GatewayProcess(strict_config)]
        start_all(stack, gateways)
        gw, strict = gateways
        assert isinstance(gw, GatewayProcess) and isinstance(strict, GatewayProcess)
        yield Env(sims, doomed, gw, strict)


@pytest.fixture(autouse=True)
def _fresh(env: Env) -> None:
    for sim in env.s:
        sim.reset()


def test_a_503_before_headers_is_retried_on_the_other_replica(env: Env) -> None:
    retries = metric(env.gw, "fairgate_upstream_retries_total", model="m")
    env.s[0].faults(fail_next=1, fail_status=503)
    answer = client(env.gw).chat.completions.create(model="m", messages=HELLO, max_tokens=2)
    assert answer.choices[0].message.content
    assert env.recorded() == [1, 1, 0, 0]
    assert env.s[1].stats()["finished"] == 1 and env.s[0].stats()["finished"] == 0
    assert metric(env.gw, "fairgate_upstream_retries_total", model="m") == retries + 1


def test_a_refused_connection_is_retried_on_the_other_replica(env: Env) -> None:
    # The first health check must have passed before the engine goes away, or
    # the replica would be skipped rather than tried (and refused).
    until(lambda: bool(env.doomed.requests(path="/v1/models")), "first health check of doomed")
    env.doomed.stop()
    answer = client(env.gw).chat.completions.create(model="gone", messages=HELLO, max_tokens=2)
    assert answer.choices[0].message.content
    assert env.recorded() == [0, 1, 0, 0]
    assert (
        metric(env.gw, "fairgate_upstream_errors_total", replica="doomed", reason="connect_error")
        >= 1
    )


def test_a_stall_before_headers_past_the_deadline_is_retried(env: Env) -> None:
    env.s[0].faults(stall_before_headers=30)
    started = time.monotonic()
    answer = client(env.gw).chat.completions.create(model="m", messages=HELLO, max_tokens=2)
    elapsed = time.monotonic() - started
    assert answer.choices[0].message.content
    assert 2.0 <= elapsed < 30.0  # the 2 s headers deadline fired, not the engine's 30 s stall
    assert env.recorded() == [1, 1, 0, 0]
    assert env.s[0].stats()["started"] == 0 and env.s[1].stats()["finished"] == 1


def test_a_stream_broken_before_its_first_event_is_retried(env: Env) -> None:
    env.s[0].faults(close_mid_stream=0)  # headers sent, then the connection drops
    chunks = list(
        client(env.gw).chat.completions.create(model="m", messages=HELLO, max_tokens=3, stream=True)
    )
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) == 3
    assert env.recorded() == [1, 1, 0, 0]


def test_a_stream_broken_after_the_first_token_is_never_retried(env: Env) -> None:
    # One token, a pause (so that token is surely relayed on its own), a second token
    # and the drop. The token sent just before the drop may be lost with it: the HTTP
    # client reports the broken connection before handing over what it had buffered.
    env.s[0].faults(stall_mid_stream=2.0, stall_mid_stream_after=1, close_mid_stream=2)
    answer = httpx.post(
        env.gw.url + CHAT,
        json={"model": "m", "messages": HELLO, "max_tokens": 5, "stream": True},
        timeout=30,
        headers=AUTH,
    )
    assert answer.status_code == 200
    events = [e for e in answer.content.split(b"\n\n") if e]
    assert b"data: [DONE]" not in events
    payloads = [orjson.loads(e.removeprefix(b"data: ")) for e in events]
    tokens = [p for p in payloads if p.get("choices") and p["choices"][0]["delta"].get("content")]
    assert 1 <= len(tokens) <= 2
    assert set(payloads[-1]) == {"error"} and payloads[-1]["error"]["message"]
    assert env.recorded() == [1, 0, 0, 0]  # the second replica never saw it


def test_the_sdk_raises_on_a_stream_broken_after_the_first_token(env: Env) -> None:
    env.s[0].faults(stall_mid_stream=2.0, stall_mid_stream_after=1, close_mid_stream=2)
    stream = client(env.gw).chat.completions.create(
        model="m", messages=HELLO, max_tokens=5, stream=True
    )
    received: list[str] = []
    with pytest.raises(openai.APIError):
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                received.append(chunk.choices[0].delta.content)
    assert 1 <= len(received) <= 2
    assert env.recorded() == [1, 0, 0, 0]


@pytest.mark.parametrize("status", [400, 500])
def test_an_engine_answer_outside_502_to_504_is_relayed_not_retried(env: Env, status: int) -> None:
    env.s[0].faults(fail_next=1, fail_status=status)
    answer = httpx.post(
        env.gw.url + CHAT, json={"model": "m", "messages": HELLO}, timeout=30, headers=AUTH
    )
    assert answer.status_code == status
    assert "injected fault" in answer.json()["error"]["message"]
    assert env.recorded() == [1, 0, 0, 0]


def test_attempts_are_bounded_by_one_plus_retries(env: Env) -> None:
    for sim in env.s:
        sim.faults(fail_next=5, fail_status=503)
    answer = httpx.post(
        env.gw.url + CHAT, json={"model": "wide", "messages": HELLO}, timeout=30, headers=AUTH
    )
    # The last engine's own answer is relayed when every attempt failed.
    assert answer.status_code == 503 and answer.headers.get("x-request-id")
    assert "injected fault" in answer.json()["error"]["message"]
    assert sum(env.recorded()) == 3


def test_retries_zero_means_one_attempt(env: Env) -> None:
    env.s[0].faults(fail_next=1, fail_status=503)
    answer = httpx.post(
        env.strict.url + CHAT, json={"model": "m", "messages": HELLO}, timeout=30, headers=AUTH
    )
    assert answer.status_code == 503
    assert env.recorded() == [1, 0, 0, 0]


def test_fallback_to_the_next_model_when_every_replica_fails(env: Env) -> None:
    fell_back = metric(env.gw, "fairgate_fallbacks_total", model="a", fallback="b")
    env.s[2].faults(fail_next=1, fail_status=503)
    answer = client(env.gw).chat.completions.create(model="a", messages=HELLO, max_tokens=2)
    assert answer.model == "b"
    assert env.recorded() == [0, 0, 1, 1]
    (seen,) = env.s[3].requests(path=CHAT)
    assert orjson.loads(seen["body"])["model"] == "b"
    assert metric(env.gw, "fairgate_fallbacks_total", model="a", fallback="b") == fell_back + 1


def test_fallback_to_the_next_model_when_the_breaker_is_open(env: Env) -> None:
    env.s[2].faults(fail_next=1, fail_status=503)
    first = httpx.post(
        env.strict.url + CHAT, json={"model": "a", "messages": HELLO}, timeout=30, headers=AUTH
    )
    assert first.status_code == 503  # retries: 0 leaves no attempt for the fallback
    assert env.recorded() == [0, 0, 1, 0]
    # The failure opened a's breaker (failures: 1): b serves at once, a is not tried.
    answer = client(env.strict).chat.completions.create(model="a", messages=HELLO, max_tokens=2)
    assert answer.model == "b"
    assert env.recorded() == [0, 0, 1, 1]


def test_no_replica_left_is_a_503_from_the_gateway(env: Env) -> None:
    env.s[1].faults(fail_next=1, fail_status=500)
    first = httpx.post(
        env.strict.url + CHAT, json={"model": "solo", "messages": HELLO}, timeout=30, headers=AUTH
    )
    assert first.status_code == 500  # relayed as the engine sent it; opens the breaker
    answer = httpx.post(
        env.strict.url + CHAT, json={"model": "solo", "messages": HELLO}, timeout=30, headers=AUTH
    )
    check_error(
        answer.status_code, answer.headers.get("x-request-id"), answer.content, 503, "no_replica"
    )
    assert env.recorded() == [0, 1, 0, 0]
