"""The simulator as a separate process, driven by the official ``openai`` SDK."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from fairgate.sim.process import SimProcess
from fairgate.sim.tokenizer import Tokenizer

pytestmark = pytest.mark.slow

MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Name three prime numbers, please."},
]


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with SimProcess(
        "--speed", "200", "--ttft", "0", "--model", "sim-a", "--model", "sim-b",
        "--embedding-dim", "32", "--max-tokens-default", "7",
    ) as process:  # fmt: skip
        yield process


@pytest.fixture(scope="module")
def instant() -> Iterator[SimProcess]:
    with SimProcess("--speed", "0", "--model", "fast") as process:
        yield process


@pytest.fixture
def client(sim: SimProcess) -> Iterator[openai.OpenAI]:
    sim.reset()
    with openai.OpenAI(base_url=sim.url + "/v1", api_key="x", max_retries=0, timeout=30) as c:
        yield c


def test_models_lists_every_served_name(client: openai.OpenAI) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == ["sim-a", "sim-b"]
    assert all(m.object == "model" and m.owned_by == "vllm" for m in models.data)


def test_chat_completion_counts_tokens_from_the_input(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(model="sim-a", messages=MESSAGES, max_tokens=5)
    assert reply.object == "chat.completion"
    assert reply.choices[0].message.role == "assistant"
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == len(Tokenizer().chat(MESSAGES))
    assert reply.usage.completion_tokens == 5
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + 5
    assert reply.usage.prompt_tokens_details is not None
    assert reply.usage.prompt_tokens_details.cached_tokens == 0
    assert Tokenizer().count(reply.choices[0].message.content or "") == 5


def test_max_completion_tokens_wins_and_the_default_length_stops(client: openai.OpenAI) -> None:
    capped = client.chat.completions.create(
        model="sim-a",
        messages=MESSAGES,
        max_completion_tokens=3,
        max_tokens=9,
    )
    assert capped.usage is not None and capped.usage.completion_tokens == 3
    default = client.chat.completions.create(model="sim-b", messages=MESSAGES)
    assert default.usage is not None and default.usage.completion_tokens == 7
    assert default.choices[0].finish_reason == "stop"
    assert default.model == "sim-b"


def test_chat_stream_sends_one_chunk_per_token_and_the_usage(client: openai.OpenAI) -> None:
    whole = client.chat.completions.create(model="sim-a", messages=MESSAGES, max_tokens=6)
    stream = client.chat.completions.create(
        model="sim-a",
        messages=MESSAGES,
        max_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    content = [c.choices[0].delta.content for c in chunks[1:] if c.choices]
    assert len(content) == 6
    assert "".join(x or "" for x in content) == whole.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 6


def test_chat_stream_without_include_usage_has_no_usage_chunk(client: openai.OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model="sim-a",
            messages=MESSAGES,
            max_tokens=2,
            stream=True,
        )
    )
    assert all(c.choices and c.usage is None for c in chunks)


def test_completions_whole_and_streamed(client: openai.OpenAI) -> None:
    whole = client.completions.create(model="sim-a", prompt="Once upon a time", max_tokens=4)
    assert whole.object == "text_completion"
    assert whole.usage is not None and whole.usage.prompt_tokens == 4
    assert whole.usage.completion_tokens == 4
    parts = list(
        client.completions.create(
            model="sim-a",
            prompt="Once upon a time",
            max_tokens=4,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    texts = [p.choices[0].text for p in parts if p.choices]
    assert len(texts) == 4
    assert "".join(texts) == whole.choices[0].text
    assert parts[-1].usage is not None and parts[-1].usage.total_tokens == 8


def test_completions_accept_token_ids(client: openai.OpenAI) -> None:
    reply = client.completions.create(model="sim-a", prompt=[5, 6, 7, 8, 9], max_tokens=1)
    assert reply.usage is not None and reply.usage.prompt_tokens == 5


def test_embeddings_as_base64_and_as_floats(client: openai.OpenAI) -> None:
    packed = client.embeddings.create(model="sim-a", input=["alpha beta", "gamma"])
    plain = client.embeddings.create(
        model="sim-a", input=["alpha beta", "gamma"], encoding_format="float"
    )
    assert [d.index for d in packed.data] == [0, 1]
    for a, b in zip(packed.data, plain.data, strict=True):
        assert len(a.embedding) == 32
        assert math.isclose(math.fsum(x * x for x in b.embedding), 1.0, rel_tol=1e-6)
        assert all(
            math.isclose(x, y, abs_tol=1e-6) for x, y in zip(a.embedding, b.embedding, strict=True)
        )
    assert packed.data[0].embedding != packed.data[1].embedding
    assert packed.usage.prompt_tokens == 3


def test_responses_whole(client: openai.OpenAI) -> None:
    response = client.responses.create(model="sim-a", input="Say hello", max_output_tokens=4)
    assert response.status == "incomplete"
    assert Tokenizer().count(response.output_text) == 4
    assert response.usage is not None
    assert response.usage.output_tokens == 4
    assert response.usage.input_tokens == len(
        Tokenizer().chat([{"role": "user", "content": "Say hello"}])
    )
    finished = client.responses.create(model="sim-a", input="Say hello", instructions="Be kind.")
    assert finished.status == "completed"


def test_responses_stream_events(client: openai.OpenAI) -> None:
    events = list(client.responses.create(model="sim-a", input="Say hello", stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created"
    assert kinds[-1] == "response.completed"
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) == 7
    done = events[-1]
    assert done.type == "response.completed"
    assert done.response.usage is not None and done.response.usage.output_tokens == 7
    assert done.response.output_text == "".join(deltas)
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_unknown_model_is_404_in_vllm_shape(sim: SimProcess, client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="gpt-nope", messages=MESSAGES)
    assert caught.value.status_code == 404
    body = httpx.post(sim.url + "/v1/completions", json={"model": "gpt-nope", "prompt": "x"}).json()
    assert body == {
        "error": {
            "message": "The model `gpt-nope` does not exist.",
            "type": "NotFoundError",
            "param": None,
            "code": 404,
        }
    }


def test_malformed_bodies_are_400_never_422(sim: SimProcess) -> None:
    url = sim.url + "/v1/chat/completions"
    assert httpx.post(url, content=b"{not json").status_code == 400
    assert httpx.post(url, json=["a list"]).status_code == 400
    assert httpx.post(url, json={"model": "sim-a", "messages": "hi"}).status_code == 400
    too_long = {"model": "sim-a", "messages": MESSAGES, "max_tokens": 10**6}
    answer = httpx.post(url, json=too_long)
    assert answer.status_code == 400
    assert "maximum context length" in answer.json()["error"]["message"]
    assert httpx.get(sim.url + "/v1/nowhere").json() == {"detail": "Not Found"}
    assert httpx.get(url).status_code == 405


def test_health_is_an_empty_200(sim: SimProcess) -> None:
    answer = httpx.get(sim.url + "/health")
    assert answer.status_code == 200 and answer.content == b""


def test_instant_mode_serves_the_sdk_without_a_scheduler(instant: SimProcess) -> None:
    client = openai.OpenAI(base_url=instant.url + "/v1", api_key="x", max_retries=0)
    reply = client.chat.completions.create(model="fast", messages=MESSAGES, max_tokens=50)
    assert reply.usage is not None and reply.usage.completion_tokens == 50
    chunks = list(
        client.chat.completions.create(
            model="fast",
            messages=MESSAGES,
            max_tokens=50,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) == 50
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 50
    client.close()
    stats = instant.stats()
    assert stats["finished"] >= 2 and stats["kv_blocks_total"] == 0


def test_api_key_guards_v1_like_vllm(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("s3cret\n")
    with SimProcess("--api-key-file", str(key_file), "--speed", "0") as sim:
        refused = httpx.post(sim.url + "/v1/chat/completions", json={"messages": MESSAGES})
        assert refused.status_code == 401
        assert refused.json() == {"error": "Unauthorized"}
        wrong = openai.OpenAI(base_url=sim.url + "/v1", api_key="guess", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            wrong.models.list()
        right = openai.OpenAI(base_url=sim.url + "/v1", api_key="s3cret", max_retries=0)
        assert right.chat.completions.create(model="sim-model", messages=MESSAGES).choices
        # vLLM guards /v1 only; probes and the control surface stay open
        for path in ("/health", "/metrics", "/sim/stats"):
            assert httpx.get(sim.url + path).status_code == 200
        wrong.close()
        right.close()
        # the refused request is still in the record, key and all
        assert sim.requests(path="/v1/chat/completions")[0]["body"].startswith("{")
