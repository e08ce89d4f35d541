"""Batches and several choices on llama-server's OpenAI routes are charged every sequence.

llama-server runs a task per prompt of a ``prompt`` list and per choice, and its
answer reports the first task's ``usage`` only (a stream: one per task). A
gateway that took that report as the request's usage charged one sequence of
sixteen prompts × eight choices. A real engine process (``llama_batch_engine.py``)
answers as llama-server does, and the records are checked against what it
generated: a plain answer is charged its reservation (flagged estimated), a
stream the sum of its tasks' reports.
"""

from __future__ import annotations

import sqlite3
import sys
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
from tests.e2e.raw_client import raw_request, request_bytes

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import ServerProcess

pytestmark = pytest.mark.slow

ENGINE = Path(__file__).with_name("llama_batch_engine.py")
JSON = [("Content-Type", "application/json")]


@dataclass(frozen=True, slots=True)
class Env:
    directory: Path
    engine: ServerProcess
    gateway: GatewayProcess


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    directory = tmp_path_factory.mktemp("gw")
    with ExitStack() as stack:
        engine = stack.enter_context(
            ServerProcess([sys.executable, str(ENGINE)], "llama batch engine listening on ")
        )
        upstreams = [{"name": "r0", "url": engine.url}]
        cost = {"input_per_mtok": 1.0, "output_per_mtok": 1.0}
        config = write_config(
            directory, [model("l", engine="llama-server", upstreams=upstreams, cost=cost)]
        )
        gateway = stack.enter_context(GatewayProcess(config, stderr=directory / "gateway.log"))
        yield Env(directory, engine, gateway)


def generated(env: Env) -> dict[str, int]:
    answer: dict[str, int] = httpx.get(env.engine.url + "/stats", timeout=10).json()
    return answer


def record(env: Env, request_id: str) -> dict[str, Any]:
    """The request's usage record, once the recorder has written it."""
    deadline = time.monotonic() + 10
    while True:
        with sqlite3.connect(env.directory / "fairgate.db") as db:
            db.row_factory = sqlite3.Row
            row = db.execute(
                "SELECT * FROM usage_records WHERE request_id = ?", (request_id,)
            ).fetchone()
        if row is not None:
            return dict(row)
        assert time.monotonic() < deadline, f"no record of {request_id}"
        time.sleep(0.1)


def charged(env: Env, path: str, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, int]]:
    """Send ``body`` and return its record and what the engine generated for it."""
    before = generated(env)
    answer = raw_request(
        env.gateway.url, request_bytes("POST", path, headers=JSON, body=orjson.dumps(body))
    )
    assert answer.status == 200, answer.body
    after = generated(env)
    request_id = answer.header("x-request-id")
    assert request_id is not None
    made = {kind: after[kind] - before[kind] for kind in after}
    return record(env, request_id), made


PROMPTS = ["one two three", "four five", "six seven eight nine"]
CHAT = {"messages": [{"role": "user", "content": "say something"}]}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/completions", {"prompt": PROMPTS, "max_tokens": 5}),
        ("/v1/completions", {"prompt": PROMPTS, "max_tokens": 5, "n": 2}),
        ("/v1/chat/completions", {**CHAT, "max_tokens": 4, "n": 3}),
        ("/v1/chat/completions", {**CHAT, "n_predict": 4, "n_cmpl": 2}),
    ],
    ids=["prompts", "prompts-and-choices", "chat-n", "chat-n_cmpl"],
)
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_every_sequence_of_a_request_is_charged(
    env: Env, path: str, body: dict[str, Any], stream: bool
) -> None:
    request = {"model": "l", **body, "stream": stream}
    if stream:
        request["stream_options"] = {"include_usage": True}
    row, made = charged(env, path, request)
    assert row["completion_tokens"] >= made["completion_tokens"], (row, made)
    if stream:  # every task's report came: their sum, exact
        assert row["completion_tokens"] == made["completion_tokens"]
        assert row["prompt_tokens"] == made["prompt_tokens"]
        assert not row["estimated"]
    else:  # the answer reports one task's usage: the reservation, flagged
        assert row["estimated"]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_one_sequence_is_charged_its_report(env: Env, stream: bool) -> None:
    request: dict[str, Any] = {"model": "l", "prompt": "just one", "max_tokens": 6}
    request["stream"] = stream
    row, made = charged(env, "/v1/completions", request)
    assert (made["prompt_tokens"], made["completion_tokens"]) == (2, 6)
    assert (row["prompt_tokens"], row["completion_tokens"]) == (2, 6)
    assert not row["estimated"]


def test_a_stream_ended_before_every_sequence_reported_is_charged_its_reservation(
    env: Env,
) -> None:
    # a chat stream without include_usage: llama-server sends no usage chunk at all
    request = {"model": "l", **CHAT, "max_tokens": 3, "n": 2, "stream": True}
    row, made = charged(env, "/v1/chat/completions", request)
    assert row["completion_tokens"] >= made["completion_tokens"]
    assert row["estimated"]
