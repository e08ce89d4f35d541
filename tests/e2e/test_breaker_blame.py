"""One tenant's long answers do not open a replica's breaker for everyone.

An engine sends a plain (non-stream) answer's headers only once it has generated
the whole answer, as long as the client asked for: a plain request past
``limits.headers_timeout`` says nothing about the replica. Before, three such
requests from one key opened the breaker of every replica they were retried on,
and every other tenant got 503 ``no_replica`` for the whole backoff. A stream's
headers come at once, so a stream whose headers are late still counts.

``m`` has two simulators at 50 tokens per second, ``w`` one simulator; headers
deadline 1.5 s, breaker opening after 3 failures for 60 s, one retry.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.e2e.conftest import AUTH, model, write_config

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess

pytestmark = pytest.mark.slow

CHAT = "/v1/chat/completions"


@dataclass(frozen=True, slots=True)
class Env:
    sims: list[SimProcess]
    gw: GatewayProcess


def chat(model_name: str, tokens: int, *, stream: bool = False) -> dict[str, Any]:
    return {
        "model": model_name,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": tokens,
        "stream": stream,
    }


def post(gw: GatewayProcess, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(gw.url + CHAT, headers=AUTH, json=body, timeout=30)


def open_breakers(gw: GatewayProcess, model_name: str) -> dict[str, float]:
    text = httpx.get(gw.admin_url + "/metrics", timeout=30).text
    return {
        sample.labels["replica"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "fairgate_upstream_breaker_open"
        and sample.labels.get("model") == model_name
    }


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with ExitStack() as stack:
        sims = [SimProcess("--speed", "50", "--ttft", "0", "--model", "m") for _ in range(3)]
        for sim in sims:
            stack.callback(sim.stop)
        with ThreadPoolExecutor(len(sims)) as pool:
            list(pool.map(lambda s: s.start(), sims))
        config = write_config(
            tmp_path_factory.mktemp("gw"),
            [model("m", *sims[:2]), model("w", sims[2], upstream_model="m")],
            proxy={"retries": 1},
            breaker={"failures": 3, "backoff_initial": "60s", "backoff_max": "60s"},
            limits={"headers_timeout": "1500ms"},
            health={"interval": "1h", "timeout": "5s"},
        )
        gw = GatewayProcess(config)
        stack.callback(gw.stop)
        gw.start()
        yield Env(sims, gw)


def test_long_plain_answers_past_the_headers_deadline_open_no_breaker(env: Env) -> None:
    # 200 tokens at 50 per second: 4 s, past the 1.5 s headers deadline on each replica
    with ThreadPoolExecutor(3) as pool:
        long = list(pool.map(lambda _: post(env.gw, chat("m", 200)), range(3)))
    assert [r.status_code for r in long] == [504] * 3
    assert all(r.json()["error"]["message"] == "the model did not answer in time" for r in long)
    assert sum(len(sim.requests(path=CHAT)) for sim in env.sims[:2]) == 6  # each retried once
    assert open_breakers(env.gw, "m") == {"r0": 0.0, "r1": 0.0}
    # another tenant's short request is served at once
    answer = post(env.gw, chat("m", 2))
    assert answer.status_code == 200, answer.text


def test_streams_whose_headers_never_come_still_open_the_breaker(env: Env) -> None:
    env.sims[2].faults(stall_before_headers=30, times=3)
    with ThreadPoolExecutor(3) as pool:
        stuck = list(pool.map(lambda _: post(env.gw, chat("w", 2, stream=True)), range(3)))
    assert [r.status_code for r in stuck] == [504] * 3
    assert open_breakers(env.gw, "w") == {"r0": 1.0}
    refused = post(env.gw, chat("w", 2))
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "no_replica"
