"""One tenant's requests that make the engine answer 500 do not open its breaker for everyone.

An engine that *answers* 500 is up and answering; the request may be what trips
it (a prompt or a parameter an engine bug chokes on fails on every replica
alike). Before, three such answers in a row to one key opened the replica's
breaker, and every other tenant got 503 ``no_replica`` for the whole backoff —
and the hostile key, winning the half-open probes, doubled it up to a minute. A
caller now counts once in a run of failures: the 500s of ``breaker.failures``
different keys in a row still open it (a replica that fails everybody's requests
while its ``/health`` passes).

One simulator behind three models (one per test, so that each test starts with a
closed breaker on its replica ``r0``), breaker opening after 3 failures for 60 s;
the simulator answers the next requests 500 when a test arms it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.e2e.conftest import TEST_KEY, add_key, model, write_config

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess

pytestmark = pytest.mark.slow

CHAT = "/v1/chat/completions"


@dataclass(frozen=True, slots=True)
class Env:
    sim: SimProcess
    gw: GatewayProcess
    keys: list[str]  # three keys of team t, TEST_KEY first


def post(env: Env, key: str, model_name: str) -> httpx.Response:
    body = {"model": model_name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    return httpx.post(
        env.gw.url + CHAT, headers={"authorization": f"Bearer {key}"}, json=body, timeout=30
    )


def breaker_open(gw: GatewayProcess, model_name: str) -> float:
    text = httpx.get(gw.admin_url + "/metrics", timeout=30).text
    values = [
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "fairgate_upstream_breaker_open"
        and sample.labels.get("model") == model_name
    ]
    assert len(values) == 1, values
    return values[0]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    sim = SimProcess("--model", "m").start()
    try:
        config = write_config(
            tmp_path_factory.mktemp("gw"),
            [model(name, sim, upstream_model="m") for name in ("a", "b", "c")],
            breaker={"failures": 3, "backoff_initial": "60s", "backoff_max": "60s"},
            health={"interval": "1h", "timeout": "5s"},
        )
        keys = [TEST_KEY, add_key(config, "t"), add_key(config, "t")]
        gw = GatewayProcess(config).start()
        try:
            yield Env(sim, gw, keys)
        finally:
            gw.stop()
    finally:
        sim.stop()


def test_one_keys_engine_500s_leave_the_replica_to_the_others(env: Env) -> None:
    env.sim.faults(fail_next=6, fail_status=500)
    hostile = [post(env, env.keys[0], "a") for _ in range(6)]
    assert [r.status_code for r in hostile] == [500] * 6  # the engine's answer, relayed
    assert breaker_open(env.gw, "a") == 0.0
    victim = post(env, env.keys[1], "a")
    assert victim.status_code == 200, victim.text


def test_the_500s_of_three_keys_in_a_row_still_open_the_breaker(env: Env) -> None:
    env.sim.faults(fail_next=3, fail_status=500)
    assert [post(env, key, "b").status_code for key in env.keys] == [500] * 3
    assert breaker_open(env.gw, "b") == 1.0
    refused = post(env, env.keys[0], "b")
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "no_replica"


def test_a_key_repeating_its_500s_does_not_hide_the_others_failures(env: Env) -> None:
    # the hostile key's repeated 500s between the others' neither count nor end the run
    env.sim.faults(fail_next=5, fail_status=500)
    order = [env.keys[0], env.keys[0], env.keys[1], env.keys[0], env.keys[2]]
    assert [post(env, key, "c").status_code for key in order] == [500] * 5
    assert breaker_open(env.gw, "c") == 1.0
