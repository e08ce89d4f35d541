"""Load-aware routing through the real gateway: session affinity and prefix affinity.

Four simulated engines (50 tokens/s, a KV cache of 80 blocks of 16 tokens: a
few system prompts each) behind one gateway with two models routed by the
default ``chat`` strategy: ``pair`` on s0 and s1, ``quad`` on s0..s3. Which
simulator recorded a request (its text carries a tag) shows where it went.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.e2e.conftest import AUTH, write_config

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess

pytestmark = pytest.mark.slow

CHAT = "/v1/chat/completions"
ENGINE_MODEL = "chat"
SIM_FLAGS = ("--model", ENGINE_MODEL, "--speed", "50", "--ttft", "20ms", "--kv-blocks", "80")


@dataclass(frozen=True, slots=True)
class Env:
    sims: list[SimProcess]
    gw: GatewayProcess


def upstreams(sims: list[SimProcess]) -> list[dict[str, Any]]:
    return [{"name": f"s{i}", "url": sim.url} for i, sim in enumerate(sims)]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    sims = [SimProcess(*SIM_FLAGS) for _ in range(4)]
    with ExitStack() as stack:
        for sim in sims:
            stack.callback(sim.stop)
        with ThreadPoolExecutor(len(sims)) as pool:
            list(pool.map(lambda s: s.start(), sims))
        models = [
            {"name": "pair", "upstream_model": ENGINE_MODEL, "upstreams": upstreams(sims[:2])},
            {"name": "quad", "upstream_model": ENGINE_MODEL, "upstreams": upstreams(sims)},
        ]
        directory: Path = tmp_path_factory.mktemp("routing")
        gateway = GatewayProcess(write_config(directory, models))
        stack.callback(gateway.stop)
        gateway.start()
        yield Env(sims, gateway)


def body(model: str, *messages: tuple[str, str], **extra: Any) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": role, "content": text} for role, text in messages],
        "max_tokens": 1,
        **extra,
    }


def where(sims: list[SimProcess], tag: str) -> int:
    """The index of the one simulator that received the request tagged ``tag``."""
    found = [i for i, sim in enumerate(sims) for r in sim.requests(path=CHAT) if tag in r["body"]]
    assert len(found) == 1, f"{tag} reached {found}"
    return found[0]


def until(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout:g}s: {what}"
        time.sleep(0.05)


def gateway_in_flight(gw: GatewayProcess, model: str) -> float:
    text = httpx.get(gw.admin_url + "/metrics", timeout=30).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "fairgate_upstream_in_flight" and sample.labels.get("model") == model
    )


def test_a_session_stays_on_its_replica_until_its_load_bound_moves_it(env: Env) -> None:
    for sim in env.sims:
        sim.reset()
    pair = env.sims[:2]
    with httpx.Client(base_url=env.gw.url, headers=AUTH, timeout=60) as client:

        def ask(session: str, tag: str) -> None:
            answer = client.post(
                CHAT, json=body("pair", ("user", tag)), headers={"x-session-id": session}
            )
            assert answer.status_code == 200, answer.text

        # Under its bound (one request at a time), every turn of a session goes home.
        homes: dict[str, int] = {}
        for n in range(10):
            session = f"user-{n}"
            for turn in range(3):
                ask(session, f"{session} turn-{turn}")
            went = {where(pair, f"{session} turn-{t}") for t in range(3)}
            assert len(went) == 1, f"the turns of {session} went to {sorted(went)}"
            homes[session] = went.pop()
        assert set(homes.values()) == {0, 1}  # sessions spread over both replicas

        # Over its bound, the session moves. With two replicas and ε = 0.25 a
        # replica may carry ceil(1.25 · (L + 1) / 2) in flight: the home takes the
        # first two concurrent requests, the third goes to the other replica.
        hot = "user-0"
        placed, readers = [], []
        with ExitStack() as held:
            for k in range(3):
                tag = f"{hot} held-{k}"
                request = body("pair", ("user", tag), max_tokens=1000, stream=True)
                stream = held.enter_context(
                    client.stream("POST", CHAT, json=request, headers={"x-session-id": hot})
                )
                assert stream.status_code == 200
                readers.append(stream.iter_raw())  # kept: a dropped reader closes the stream
                next(readers[-1])  # its first bytes: it is in flight on its replica
                placed.append(where(pair, tag))
        assert placed == [homes[hot], homes[hot], 1 - homes[hot]]

        # Once the load is gone, the session is home again.
        until(lambda: gateway_in_flight(env.gw, "pair") == 0, "held streams released")
        ask(hot, f"{hot} after")
        assert where(pair, f"{hot} after") == homes[hot]


WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
]


def system_prompts(count: int) -> list[str]:
    """Distinct system prompts of 400 words: about 25 KV blocks each, three fit in one engine."""
    rng = random.Random(11)
    return [f"prompt {i}: " + " ".join(rng.choice(WORDS) for _ in range(400)) for i in range(count)]


def cached_tokens(answer: httpx.Response) -> int:
    assert answer.status_code == 200, answer.text
    details = answer.json()["usage"].get("prompt_tokens_details") or {}
    return int(details.get("cached_tokens") or 0)


def test_prefix_affinity_finds_more_cached_tokens_than_round_robin(env: Env) -> None:
    # Six system prompts shared by 30 conversations: more than one engine can hold,
    # fewer than four together can.
    prompts = system_prompts(6)
    order = [i for i in range(6) for _ in range(5)]
    random.Random(3).shuffle(order)
    workload = [
        (("system", prompts[p]), ("user", f"question {n} about prompt {p}"))
        for n, p in enumerate(order)
    ]

    # Round-robin: what a balancer blind to prompts does, straight to the engines.
    for sim in env.sims:
        sim.reset()
    clients = [httpx.Client(base_url=sim.url, timeout=60) for sim in env.sims]
    with ExitStack() as stack:
        for c in clients:
            stack.enter_context(c)
        turns = sum(
            cached_tokens(clients[n % 4].post(CHAT, json=body(ENGINE_MODEL, *messages)))
            for n, messages in enumerate(workload)
        )

    # Through the gateway: prefix affinity (and one session per conversation).
    for sim in env.sims:
        sim.reset()
    with httpx.Client(base_url=env.gw.url, headers=AUTH, timeout=60) as client:
        affine = sum(
            cached_tokens(
                client.post(
                    CHAT, json=body("quad", *messages), headers={"x-session-id": f"conv-{n}"}
                )
            )
            for n, messages in enumerate(workload)
        )
    served = [sim.stats()["finished"] for sim in env.sims]
    assert sum(served) == len(workload)
    prompt_tokens = sum(sim.stats()["prompt_tokens_total"] for sim in env.sims)
    print(f"cached tokens: round-robin {turns}, prefix affinity {affine} of {prompt_tokens}")
    assert affine >= 0.6 * prompt_tokens
    assert affine >= 1.5 * turns
