"""Every client route through the gateway, plain and streamed, with its usage counted.

One vLLM simulator serves model ``m`` (alias ``alias-m``) and one llama-server
simulator serves ``l`` (engine kind ``llama-server``). The gateway's token
counter on its admin ``/metrics`` must grow by exactly what the simulator
reported, whether or not the client asked to see the usage.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import httpx
import openai
import orjson
import pytest
from openai.types.chat import ChatCompletionMessageParam
from prometheus_client.parser import text_string_to_metric_families
from tests.e2e.conftest import AUTH, TEST_KEY, model, write_config
from tests.e2e.raw_client import check_error

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess

pytestmark = pytest.mark.slow

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello there"}]


@dataclass(frozen=True, slots=True)
class Env:
    vllm: SimProcess
    llama: SimProcess
    gateway: GatewayProcess

    @property
    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.gateway.url + "/v1", api_key=TEST_KEY, max_retries=0)

    def counters(self, family: str, model_name: str) -> dict[str, float]:
        """``fairgate_<family>_total`` samples of ``model_name`` by their ``kind`` label."""
        text = httpx.get(self.gateway.admin_url + "/metrics", timeout=30).text
        found: dict[str, float] = {}
        for metric in text_string_to_metric_families(text):
            for sample in metric.samples:
                if sample.name == f"fairgate_{family}_total" and (
                    sample.labels.get("model") == model_name
                ):
                    found[sample.labels.get("kind", "")] = sample.value
        return found

    def tokens_grew_by(self, before: dict[str, float], model_name: str, **expected: int) -> None:
        """Wait (bounded) until the token counters moved by ``expected``, then compare exactly."""
        deadline = time.monotonic() + 10
        while True:
            now = self.counters("tokens", model_name)
            grown = {k: now.get(k, 0.0) - before.get(k, 0.0) for k in ("prompt", "completion")}
            if grown == {k: float(v) for k, v in expected.items()} or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert grown == {k: float(v) for k, v in expected.items()}


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with ExitStack() as stack:
        vllm = stack.enter_context(SimProcess("--speed", "0", "--model", "m"))
        llama = stack.enter_context(
            SimProcess("--speed", "0", "--model", "l", "--personality", "llama-server")
        )
        config = write_config(
            tmp_path_factory.mktemp("gw"),
            [
                model("m", vllm, aliases=["alias-m"]),
                model("l", llama, engine="llama-server"),
                model("org/big", vllm, upstream_model="m"),
            ],
        )
        yield Env(vllm, llama, stack.enter_context(GatewayProcess(config)))


@pytest.fixture(autouse=True)
def _fresh(env: Env) -> None:
    env.vllm.reset()
    env.llama.reset()


def test_models_are_answered_by_the_gateway_with_aliases(env: Env) -> None:
    client = env.client
    listed = {entry.id: entry.model_extra for entry in client.models.list()}
    assert set(listed) == {"m", "alias-m", "l", "org/big"}
    assert listed["alias-m"] == {"root": "m"}
    one = client.models.retrieve("alias-m")
    assert one.id == "alias-m" and one.model_extra == {"root": "m"}
    assert client.models.retrieve("l").id == "l"
    # The SDK sends a "/" in a model id as %2F: still the model, not a refused path.
    assert client.models.retrieve("org/big").id == "org/big"
    missing = httpx.get(env.gateway.url + "/v1/models/nope", timeout=30, headers=AUTH)
    check_error(
        missing.status_code,
        missing.headers.get("x-request-id"),
        missing.content,
        404,
        "model_not_found",
    )
    assert env.vllm.requests() == [] and env.llama.requests() == []


def test_model_lookups_do_not_make_metric_labels_of_model_ids(env: Env) -> None:
    for name in ("guess-1", "guess-2", "m"):
        httpx.get(f"{env.gateway.url}/v1/models/{name}", timeout=30, headers=AUTH)
    text = httpx.get(env.gateway.admin_url + "/metrics", timeout=30).text
    routes = {
        sample.labels["route"]
        for metric in text_string_to_metric_families(text)
        for sample in metric.samples
        if "route" in sample.labels
    }
    assert "/v1/models/{model}" in routes
    assert not any("guess" in route or route.endswith("/m") for route in routes), routes


def test_chat_plain(env: Env) -> None:
    before = env.counters("tokens", "m")
    answer = env.client.chat.completions.create(model="alias-m", messages=HELLO, max_tokens=5)
    assert answer.choices[0].message.content
    assert answer.usage is not None and answer.usage.completion_tokens == 5
    (seen,) = env.vllm.requests()
    assert seen["path"] == "/v1/chat/completions"
    assert orjson.loads(seen["body"])["model"] == "m"  # the alias became the engine's id
    env.tokens_grew_by(before, "m", prompt=answer.usage.prompt_tokens, completion=5)


@pytest.mark.parametrize("include_usage", [True, False])
def test_chat_stream_usage_chunk_only_when_asked(env: Env, include_usage: bool) -> None:
    before = env.counters("tokens", "m")
    chunks = list(
        env.client.chat.completions.create(
            model="m",
            messages=HELLO,
            max_tokens=4,
            stream=True,
            stream_options={"include_usage": True} if include_usage else openai.omit,
        )
    )
    text = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(text) == 4
    usage = [c.usage for c in chunks if c.usage is not None]
    stats = env.vllm.stats()
    assert stats["generation_tokens_total"] == 4
    if include_usage:
        assert len(usage) == 1 and usage[0].completion_tokens == 4
        assert usage[0].prompt_tokens == stats["prompt_tokens_total"]
    else:
        assert usage == []
    # Counted either way: the gateway asked the engine for the usage chunk itself.
    env.tokens_grew_by(before, "m", prompt=stats["prompt_tokens_total"], completion=4)


def test_completions_plain_and_stream(env: Env) -> None:
    before = env.counters("tokens", "m")
    answer = env.client.completions.create(model="m", prompt="once upon a time", max_tokens=3)
    assert answer.usage is not None and answer.usage.completion_tokens == 3
    chunks = list(
        env.client.completions.create(
            model="m", prompt="once upon a time", max_tokens=6, stream=True
        )
    )
    assert sum(1 for c in chunks if c.choices and c.choices[0].text) == 6
    assert all(c.usage is None for c in chunks)
    stats = env.vllm.stats()
    assert [r["path"] for r in env.vllm.requests()] == ["/v1/completions"] * 2
    env.tokens_grew_by(before, "m", prompt=stats["prompt_tokens_total"], completion=9)


def test_embeddings(env: Env) -> None:
    before = env.counters("tokens", "m")
    answer = env.client.embeddings.create(model="alias-m", input=["one", "two three"])
    assert len(answer.data) == 2 and answer.model == "m"
    assert answer.usage.prompt_tokens == env.vllm.stats()["prompt_tokens_total"] > 0
    env.tokens_grew_by(before, "m", prompt=answer.usage.prompt_tokens, completion=0)


def test_responses_plain_and_stream(env: Env) -> None:
    before = env.counters("tokens", "m")
    answer = env.client.responses.create(model="m", input="hello", max_output_tokens=4)
    assert answer.usage is not None and answer.usage.output_tokens == 4
    events = list(
        env.client.responses.create(model="m", input="hello", max_output_tokens=3, stream=True)
    )
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) == 3
    assert events[-1].type in ("response.completed", "response.incomplete")
    final = events[-1].response.usage
    assert final is not None and final.output_tokens == 3
    env.tokens_grew_by(
        before, "m", prompt=answer.usage.input_tokens + final.input_tokens, completion=7
    )


def test_engine_native_route_plain_and_stream(env: Env) -> None:
    """llama-server's own ``/completion``: relayed whole, its native stream ends cleanly,
    and both are charged the tokens the engine reports in its own fields."""
    estimated = env.counters("usage_estimated", "l").get("", 0.0)
    before = env.counters("tokens", "l")
    url = env.gateway.url + "/completion"
    plain = httpx.post(
        url, json={"model": "l", "prompt": "hi", "n_predict": 3}, timeout=30, headers=AUTH
    )
    assert plain.status_code == 200 and plain.json()["tokens_predicted"] == 3
    streamed = httpx.post(
        url,
        json={"model": "l", "prompt": "hi", "n_predict": 3, "stream": True},
        timeout=30,
        headers=AUTH,
    )
    assert streamed.status_code == 200
    events = [orjson.loads(e[len(b"data: ") :]) for e in streamed.content.split(b"\n\n") if e]
    # The native stream has no [DONE]: its last event says "stop": true, and the
    # gateway must not take that for an engine that broke off.
    assert [e.get("stop") for e in events] == [False, False, False, True]
    assert all("error" not in e for e in events)
    assert [r["path"] for r in env.llama.requests()] == ["/completion", "/completion"]
    # No OpenAI usage on the native route: tokens_evaluated / tokens_predicted are read,
    # from the plain answer and from the stream's closing event; nothing is estimated.
    prompt = plain.json()["tokens_evaluated"] + events[-1]["tokens_evaluated"]
    env.tokens_grew_by(before, "l", prompt=prompt, completion=3 + 3)
    assert env.counters("usage_estimated", "l").get("", 0.0) == estimated


def test_engine_native_route_not_served_by_the_engine_is_relayed(env: Env) -> None:
    """``/tokenize`` is allowed for vLLM; the simulator does not serve it and says so."""
    answer = httpx.post(
        env.gateway.url + "/tokenize", json={"model": "m", "prompt": "hi"}, timeout=30, headers=AUTH
    )
    assert answer.status_code == 404 and answer.json() == {"detail": "Not Found"}
    (seen,) = env.vllm.requests()
    assert seen["path"] == "/tokenize"
