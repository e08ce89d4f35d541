"""Every request's output is bounded by its reservation, and charged, through real processes.

Each test is an attack a tenant could make before the output bound existed: no
``max_tokens`` (the engine runs on), ``ignore_eos``, llama-server's ``n_predict``
(read before ``max_tokens``) or ``-1``, a batch of prompts, ``n``; a native
llama-server answer charged zero output; a stream abandoned before its usage
report. The figures are read back from ``GET /me`` (the TPM window holds exactly
what the request was charged) and from the usage records in the store.

One gateway serves the module; each test has a key of its own (its TPM window and its
usage records are that test's alone) and the simulators are reset before each test.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from tests.e2e.conftest import model, write_config
from tests.e2e.robust_wire import until
from tests.e2e.test_limits import refusal

from fairgate.config import load_config
from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess
from fairgate.tenancy import open_tenancy
from fairgate.tenancy.actor import Actor
from fairgate.tenancy.limits import Limits

pytestmark = pytest.mark.slow

TPM = 1_000_000
DEFAULT_CAP = 50  # limits.default_max_tokens


@dataclass(frozen=True, slots=True)
class Env:
    """The module's gateway and its engines: ``uncapped`` writes 3,000 tokens for a request
    that sets no cap, ``llama`` is a llama-server, ``paced`` writes 20 tokens a second."""

    uncapped: SimProcess
    llama: SimProcess
    paced: SimProcess
    gateway: GatewayProcess
    config: Path


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with ExitStack() as stack:
        uncapped = stack.enter_context(
            SimProcess("--model", "m", "--speed", "0", "--max-tokens-default", "3000")
        )
        llama = stack.enter_context(
            SimProcess("--model", "l", "--speed", "0", "--personality", "llama-server")
        )
        paced = stack.enter_context(SimProcess("--model", "m", "--speed", "20", "--ttft", "0"))
        models = [
            model("m", uncapped),
            model("m-100", uncapped, max_tokens=100, upstream_model="m"),  # a ceiling of 100
            model("l", llama, engine="llama-server"),
            model("l-64", llama, engine="llama-server", max_tokens=64, upstream_model="l"),
            model("paced", paced, upstream_model="m"),
        ]
        directory = tmp_path_factory.mktemp("gw")
        config = write_config(directory, models, limits={"default_max_tokens": DEFAULT_CAP})
        gateway = stack.enter_context(GatewayProcess(config))
        yield Env(uncapped, llama, paced, gateway, config)


@pytest.fixture(autouse=True)
def _fresh(env: Env) -> None:
    for sim in (env.uncapped, env.llama, env.paced):
        sim.reset()


@dataclass(frozen=True, slots=True)
class Tenant:
    """A key of one test's own with a TPM limit, so ``GET /me`` shows what it was charged."""

    id: str
    headers: dict[str, str]


def tenant(env: Env, tpm: int = TPM) -> Tenant:
    async def create() -> Tenant:
        async with open_tenancy(load_config(env.config)) as tenancy:
            made = await tenancy.keys.create(
                Actor.operator("tests"), team="t", limits=Limits(tpm=tpm)
            )
        auth = {"authorization": f"Bearer {made.secret}", "content-type": "application/json"}
        return Tenant(made.key.id, auth)

    return asyncio.run(create())


def charged(env: Env, who: Tenant) -> int:
    """Tokens in the key's TPM window: what its requests were charged."""
    answer = httpx.get(env.gateway.url + "/me", headers=who.headers, timeout=30)
    assert answer.status_code == 200, answer.text
    used: int = answer.json()["limits"]["tpm"]["used"]
    return used


def post(env: Env, who: Tenant, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        env.gateway.url + path, content=orjson.dumps(body), headers=who.headers, timeout=60
    )


def records(env: Env, who: Tenant) -> list[tuple[int, int, int, str]]:
    """(prompt, completion, estimated, outcome) of every usage record of the key's
    (``GET /me`` leaves one too), oldest first."""
    deadline = time.monotonic() + 10
    with sqlite3.connect(env.config.parent / "fairgate.db") as db:
        while True:
            rows = db.execute(
                "SELECT prompt_tokens, completion_tokens, estimated, outcome FROM usage_records"
                " WHERE key_id = ? ORDER BY at",
                (who.id,),
            ).fetchall()
            if rows or time.monotonic() > deadline:
                return [tuple(row) for row in rows]
            time.sleep(0.1)


def test_a_vllm_request_without_a_cap_stops_at_the_default_even_ignoring_eos(env: Env) -> None:
    # Left alone, the engine would write 3,000 tokens for a request that sets no cap.
    who = tenant(env)
    messages = [{"role": "user", "content": "hi"}]
    plain = post(env, who, "/v1/chat/completions", {"model": "m", "messages": messages})
    assert plain.status_code == 200, plain.text
    assert plain.json()["usage"]["completion_tokens"] == DEFAULT_CAP
    hostile = {"model": "m", "messages": messages, "ignore_eos": True}
    answer = post(env, who, "/v1/chat/completions", hostile)
    assert answer.json()["usage"]["completion_tokens"] == DEFAULT_CAP


def test_the_ceiling_refuses_larger_caps_and_min_tokens_above_the_cap(env: Env) -> None:
    who = tenant(env)
    for body, code in (
        ({"prompt": "x", "max_tokens": 101}, "max_tokens_too_large"),
        ({"prompt": "x", "max_tokens": 10, "min_tokens": 11}, "invalid_value"),
        ({"prompt": ["a"] * 17, "max_tokens": 1}, "too_many_prompts"),
    ):
        answer = post(env, who, "/v1/completions", {"model": "m-100", **body})
        assert refusal(answer)[:2] == (400, code), answer.text
    assert env.uncapped.requests() == []  # nothing reached the engine
    assert charged(env, who) == 0


def test_batches_and_n_are_reserved_whole(env: Env) -> None:
    who = tenant(env, tpm=1500)
    single = post(env, who, "/v1/completions", {"model": "m", "prompt": "p", "max_tokens": 100})
    assert single.status_code == 200, single.text
    used = charged(env, who)
    assert 100 < used < 200
    # 10 prompts × n 2 × 100 tokens = 2,000 reserved (a single request counts at most the
    # whole 1,500 a minute): no longer fits next to the first, where one prompt would.
    body = {"model": "m", "prompt": ["p"] * 10, "n": 2, "max_tokens": 100}
    status, code, _ = refusal(post(env, who, "/v1/completions", body))
    assert (status, code) == (429, "tpm_limit_exceeded")
    assert len(env.uncapped.requests()) == 1  # the batch never reached the engine
    assert charged(env, who) == used


def test_llama_server_requests_need_a_cap_the_engine_reads(env: Env) -> None:
    who = tenant(env)
    for body, code in (
        ({"prompt": "hi"}, "max_tokens_required"),  # the engine would run to its context's end
        ({"prompt": "hi", "n_predict": -1}, "invalid_value"),  # llama-server's "no limit"
        ({"prompt": "hi", "n_predict": 1000, "max_tokens": 8}, "max_tokens_too_large"),
    ):
        answer = post(env, who, "/completion", {"model": "l-64", **body})
        assert refusal(answer)[:2] == (400, code), answer.text
    chat = {"model": "l-64", "messages": [{"role": "user", "content": "hi"}]}
    assert refusal(post(env, who, "/v1/chat/completions", chat))[:2] == (
        400,
        "max_tokens_required",
    )
    assert env.llama.requests() == []  # the body stays byte-exact: refused, never rewritten
    answer = post(env, who, "/completion", {"model": "l-64", "prompt": "hi", "n_predict": 8})
    assert answer.status_code == 200, answer.text


def test_llama_server_caps_only_some_builds_read_do_not_bound_a_request(env: Env) -> None:
    """Through the OpenAI routes of a llama-server: ``max_completion_tokens`` alone (which
    builds before early 2026 ignore) is refused, and the Responses route's ``n_predict``,
    which the engine reads before ``max_output_tokens``, is reserved and charged."""
    who = tenant(env)
    chat = {
        "model": "l",
        "messages": [{"role": "user", "content": "hi"}],
        "max_completion_tokens": 1,
        "ignore_eos": True,
    }
    status, code, _ = refusal(post(env, who, "/v1/chat/completions", chat))
    assert (status, code) == (400, "max_tokens_required")
    assert env.llama.requests() == []
    body = {"model": "l", "input": "hi", "max_output_tokens": 1, "n_predict": 40}
    answer = post(env, who, "/v1/responses", body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["output_tokens"] == 40  # the engine obeyed n_predict
    assert charged(env, who) >= 40


def test_llama_native_answers_are_charged_the_tokens_the_engine_reports(env: Env) -> None:
    who = tenant(env)
    plain = post(env, who, "/completion", {"model": "l", "prompt": "hi there", "n_predict": 40})
    assert plain.status_code == 200, plain.text
    reported = plain.json()
    assert reported["tokens_predicted"] == 40
    assert charged(env, who) == reported["tokens_evaluated"] + 40
    streamed = post(
        env, who, "/completion", {"model": "l", "prompt": "hi", "n_predict": 30, "stream": True}
    )
    assert streamed.status_code == 200

    def measured() -> set[tuple[int, int]]:
        return {(r[1], r[2]) for r in records(env, who)}

    until(lambda: {(40, 0), (30, 0)} <= measured(), 10, "both records")  # not estimated


@pytest.mark.parametrize("counted", [False, True], ids=["no-counts", "running-counts"])
def test_a_stream_abandoned_before_its_usage_is_charged_the_reservation(
    env: Env, counted: bool
) -> None:
    """With ``continuous_usage_stats`` every token event counts the usage so far: the
    last count a client let through before it left is still not what the engine made."""
    who = tenant(env)
    body: dict[str, Any] = {"model": "paced", "prompt": "hi", "max_tokens": 400, "stream": True}
    if counted:
        body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    raw = orjson.dumps(body)
    with httpx.stream(
        "POST", env.gateway.url + "/v1/completions", content=raw, headers=who.headers, timeout=30
    ) as response:
        assert response.status_code == 200
        for _ in zip(range(3), response.iter_lines(), strict=False):
            pass  # read a few tokens, then go away
    deadline = time.monotonic() + 10
    while charged(env, who) < 400 and time.monotonic() < deadline:
        time.sleep(0.1)
    # the engine reported nothing: the whole reservation is charged, never the 3 seen
    prompt_estimate = -(-len(raw) // 4)
    assert charged(env, who) == prompt_estimate + 400
    until(
        lambda: (prompt_estimate, 400, 1, "client_abort") in records(env, who),
        10,
        "the abandoned stream's record",
    )


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_abandoned_before_the_engine_answered_is_charged_the_reservation(
    env: Env, stream: bool
) -> None:
    # The engine works on the request (a plain answer comes whole at the end; a stream's
    # first token comes after the prefill), the client leaves before any answer: the
    # usage is unknown, so the whole reservation is charged, never nothing.
    who = tenant(env)
    env.paced.faults(stall_before_first_token=30)
    body = {"model": "paced", "prompt": "hi", "max_tokens": 300, "stream": stream}
    raw = orjson.dumps(body)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(env.gateway.url + "/v1/completions", content=raw, headers=who.headers, timeout=1)
    assert len(env.paced.requests()) == 1  # it reached the engine
    prompt_estimate = -(-len(raw) // 4)
    until(lambda: charged(env, who) == prompt_estimate + 300, 10, "the reservation charged")
    until(
        lambda: (prompt_estimate, 300, 1, "client_abort") in records(env, who),
        10,
        "the abandoned request's record",
    )
