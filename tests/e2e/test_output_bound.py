"""Every request's output is bounded by its reservation, and charged, through real processes.

Each test is an attack a tenant could make before the output bound existed: no
``max_tokens`` (the engine runs on), ``ignore_eos``, llama-server's ``n_predict``
(read before ``max_tokens``) or ``-1``, a batch of prompts, ``n``; a native
llama-server answer charged zero output; a stream abandoned before its usage
report. The figures are read back from ``GET /me`` (the TPM window holds exactly
what the request was charged) and from the usage records in the store.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from tests.e2e.conftest import AUTH, StartSim, model, write_config
from tests.e2e.robust_wire import until
from tests.e2e.test_limits import _apply, me, refusal

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess
from fairgate.tenancy.limits import KeyLimits

pytestmark = pytest.mark.slow

TPM = 1_000_000


def gateway_for(
    tmp_path: Path, models: list[dict[str, Any]], *, tpm: int = TPM, **limits: Any
) -> GatewayProcess:
    """A gateway whose TEST_KEY has a TPM limit, so ``GET /me`` shows what it was charged."""
    config = write_config(tmp_path, models, limits=limits)
    asyncio.run(_apply(config, KeyLimits(tpm=tpm), ()))
    return GatewayProcess(config)


def charged(gateway: GatewayProcess) -> int:
    """Tokens in TEST_KEY's TPM window: what its requests were charged."""
    used: int = me(gateway)["limits"]["tpm"]["used"]
    return used


HEADERS = {**AUTH, "content-type": "application/json"}


def post(gateway: GatewayProcess, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(gateway.url + path, content=orjson.dumps(body), headers=HEADERS, timeout=60)


def records(tmp_path: Path) -> list[tuple[int, int, int, str]]:
    """(prompt, completion, estimated, outcome) of every inference request's usage record
    (``GET /me`` leaves one too), oldest first."""
    deadline = time.monotonic() + 10
    with sqlite3.connect(tmp_path / "fairgate.db") as db:
        while True:
            rows = db.execute(
                "SELECT prompt_tokens, completion_tokens, estimated, outcome FROM usage_records"
                " ORDER BY at"
            ).fetchall()
            if rows or time.monotonic() > deadline:
                return [tuple(row) for row in rows]
            time.sleep(0.1)


def test_a_vllm_request_without_a_cap_stops_at_the_default_even_ignoring_eos(
    tmp_path: Path, start_sim: StartSim
) -> None:
    # Left alone, the engine would write 3,000 tokens for a request that sets no cap.
    sim = start_sim("--model", "m", "--speed", "0", "--max-tokens-default", "3000")
    with gateway_for(tmp_path, [model("m", sim)], default_max_tokens=50) as gateway:
        messages = [{"role": "user", "content": "hi"}]
        plain = post(gateway, "/v1/chat/completions", {"model": "m", "messages": messages})
        assert plain.status_code == 200, plain.text
        assert plain.json()["usage"]["completion_tokens"] == 50
        hostile = {"model": "m", "messages": messages, "ignore_eos": True}
        answer = post(gateway, "/v1/chat/completions", hostile)
        assert answer.json()["usage"]["completion_tokens"] == 50


def test_the_ceiling_refuses_larger_caps_and_min_tokens_above_the_cap(
    tmp_path: Path, start_sim: StartSim
) -> None:
    sim = start_sim("--model", "m", "--speed", "0")
    with gateway_for(tmp_path, [model("m", sim, max_tokens=100)]) as gateway:
        for body, code in (
            ({"prompt": "x", "max_tokens": 101}, "max_tokens_too_large"),
            ({"prompt": "x", "max_tokens": 10, "min_tokens": 11}, "invalid_value"),
            ({"prompt": ["a"] * 17, "max_tokens": 1}, "too_many_prompts"),
        ):
            answer = post(gateway, "/v1/completions", {"model": "m", **body})
            assert refusal(answer)[:2] == (400, code), answer.text
        assert sim.requests() == []  # nothing reached the engine
        assert charged(gateway) == 0


def test_batches_and_n_are_reserved_whole(tmp_path: Path, start_sim: StartSim) -> None:
    sim = start_sim("--model", "m", "--speed", "0")
    with gateway_for(tmp_path, [model("m", sim)], tpm=1500) as gateway:
        single = post(gateway, "/v1/completions", {"model": "m", "prompt": "p", "max_tokens": 100})
        assert single.status_code == 200, single.text
        used = charged(gateway)
        assert 100 < used < 200
        # 10 prompts × n 2 × 100 tokens = 2,000 reserved (a single request counts at most the
        # whole 1,500 a minute): no longer fits next to the first, where one prompt would.
        body = {"model": "m", "prompt": ["p"] * 10, "n": 2, "max_tokens": 100}
        status, code, _ = refusal(post(gateway, "/v1/completions", body))
        assert (status, code) == (429, "tpm_limit_exceeded")
        assert len(sim.requests()) == 1  # the batch never reached the engine
        assert charged(gateway) == used


def test_llama_server_requests_need_a_cap_the_engine_reads(
    tmp_path: Path, start_sim: StartSim
) -> None:
    sim = start_sim("--model", "l", "--speed", "0", "--personality", "llama-server")
    models = [model("l", sim, engine="llama-server", max_tokens=64)]
    with gateway_for(tmp_path, models) as gateway:
        for body, code in (
            ({"prompt": "hi"}, "max_tokens_required"),  # the engine would run to its context's end
            ({"prompt": "hi", "n_predict": -1}, "invalid_value"),  # llama-server's "no limit"
            ({"prompt": "hi", "n_predict": 1000, "max_tokens": 8}, "max_tokens_too_large"),
        ):
            answer = post(gateway, "/completion", {"model": "l", **body})
            assert refusal(answer)[:2] == (400, code), answer.text
        chat = {"model": "l", "messages": [{"role": "user", "content": "hi"}]}
        assert refusal(post(gateway, "/v1/chat/completions", chat))[:2] == (
            400,
            "max_tokens_required",
        )
        assert sim.requests() == []  # the body stays byte-exact: refused, never rewritten
        answer = post(gateway, "/completion", {"model": "l", "prompt": "hi", "n_predict": 8})
        assert answer.status_code == 200, answer.text


def test_llama_native_answers_are_charged_the_tokens_the_engine_reports(
    tmp_path: Path, start_sim: StartSim
) -> None:
    sim = start_sim("--model", "l", "--speed", "0", "--personality", "llama-server")
    with gateway_for(tmp_path, [model("l", sim, engine="llama-server")]) as gateway:
        plain = post(gateway, "/completion", {"model": "l", "prompt": "hi there", "n_predict": 40})
        assert plain.status_code == 200, plain.text
        reported = plain.json()
        assert reported["tokens_predicted"] == 40
        assert charged(gateway) == reported["tokens_evaluated"] + 40
        streamed = post(
            gateway, "/completion", {"model": "l", "prompt": "hi", "n_predict": 30, "stream": True}
        )
        assert streamed.status_code == 200
    rows = records(tmp_path)
    assert (40, 0) in [(r[1], r[2]) for r in rows]  # measured, not estimated
    assert (30, 0) in [(r[1], r[2]) for r in rows]


def test_a_stream_abandoned_before_its_usage_is_charged_the_reservation(
    tmp_path: Path, start_sim: StartSim
) -> None:
    sim: SimProcess = start_sim("--model", "m", "--speed", "20")
    with gateway_for(tmp_path, [model("m", sim)]) as gateway:
        body = {"model": "m", "prompt": "hi", "max_tokens": 400, "stream": True}
        raw = orjson.dumps(body)
        with httpx.stream(
            "POST", gateway.url + "/v1/completions", content=raw, headers=HEADERS, timeout=30
        ) as response:
            assert response.status_code == 200
            for _ in zip(range(3), response.iter_lines(), strict=False):
                pass  # read a few tokens, then go away
        deadline = time.monotonic() + 10
        while charged(gateway) < 400 and time.monotonic() < deadline:
            time.sleep(0.1)
        # the engine reported nothing: the whole reservation is charged, never the 3 seen
        prompt_estimate = -(-len(raw) // 4)
        assert charged(gateway) == prompt_estimate + 400
    assert (prompt_estimate, 400, 1, "client_abort") in records(tmp_path)


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_abandoned_before_the_engine_answered_is_charged_the_reservation(
    tmp_path: Path, start_sim: StartSim, stream: bool
) -> None:
    # The engine works on the request (a plain answer comes whole at the end; a stream's
    # first token comes after the prefill), the client leaves before any answer: the
    # usage is unknown, so the whole reservation is charged, never nothing.
    sim: SimProcess = start_sim("--model", "m", "--speed", "20", "--ttft", "0")
    with gateway_for(tmp_path, [model("m", sim)]) as gateway:
        sim.faults(stall_before_first_token=30)
        body = {"model": "m", "prompt": "hi", "max_tokens": 300, "stream": stream}
        raw = orjson.dumps(body)
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(gateway.url + "/v1/completions", content=raw, headers=HEADERS, timeout=1)
        assert len(sim.requests()) == 1  # it reached the engine
        prompt_estimate = -(-len(raw) // 4)
        until(lambda: charged(gateway) == prompt_estimate + 300, 10, "the reservation charged")
    assert (prompt_estimate, 300, 1, "client_abort") in records(tmp_path)
