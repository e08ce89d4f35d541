"""The llama-server personality: its engine-internal routes and metric names, on a real process."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import orjson
import pytest

from fairgate.sim.process import SimProcess

pytestmark = pytest.mark.slow

LLAMA_METRICS = (
    "llamacpp:prompt_tokens_total",
    "llamacpp:prompt_seconds_total",
    "llamacpp:tokens_predicted_total",
    "llamacpp:tokens_predicted_seconds_total",
    "llamacpp:n_decode_total",
    "llamacpp:n_busy_slots_per_decode",
    "llamacpp:prompt_tokens_seconds",
    "llamacpp:predicted_tokens_seconds",
    "llamacpp:requests_processing",
    "llamacpp:requests_deferred",
    "llamacpp:kv_cache_usage_ratio",
    "llamacpp:kv_cache_tokens",
)


@pytest.fixture(scope="module")
def llama() -> Iterator[SimProcess]:
    with SimProcess(
        "--personality", "llama-server", "--model", "qwen", "--max-num-seqs", "3",
        "--speed", "200", "--ttft", "0",
    ) as sim:  # fmt: skip
        yield sim


@pytest.fixture
def http(llama: SimProcess) -> Iterator[httpx.Client]:
    llama.reset()
    with httpx.Client(base_url=llama.url, timeout=30) as client:
        yield client


def test_slots_and_props_are_served(http: httpx.Client) -> None:
    slots = http.get("/slots").json()
    assert [s["id"] for s in slots] == [0, 1, 2]
    assert not any(s["is_processing"] for s in slots)
    props = http.get("/props").json()
    assert props["total_slots"] == 3 and props["model_path"].endswith("qwen.gguf")
    assert http.get("/health").json() == {"status": "ok"}


def test_native_completion_whole_and_streamed(http: httpx.Client) -> None:
    whole = http.post("/completion", json={"prompt": "The sky is", "n_predict": 4}).json()
    assert whole["stop"] is True and whole["tokens_predicted"] == 4
    assert whole["tokens_evaluated"] == 3 and whole["stop_type"] == "limit"
    streamed = http.post(
        "/completion", json={"prompt": "The sky is", "n_predict": 4, "stream": True}
    )
    events = [
        orjson.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: ")
    ]
    assert [e["stop"] for e in events] == [False] * 4 + [True]
    assert "".join(e["content"] for e in events) == whole["content"]
    assert "[DONE]" not in streamed.text


def test_infill_takes_prefix_and_suffix(http: httpx.Client) -> None:
    answer = http.post("/infill", json={"input_prefix": "def add(a, b):", "input_suffix": "return"})
    assert answer.status_code == 200
    assert answer.json()["tokens_evaluated"] == 9  # def add ( a , b ) : return


def test_openai_routes_work_and_ignore_model_and_priority(
    llama: SimProcess, http: httpx.Client
) -> None:
    client = openai.OpenAI(base_url=llama.url + "/v1", api_key="x", max_retries=0)
    reply = client.chat.completions.create(
        model="whatever",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=2,
        extra_headers={"X-Vllm-Priority": "5"},
    )
    assert reply.usage is not None and reply.usage.completion_tokens == 2
    assert [m.owned_by for m in client.models.list().data] == ["llamacpp"]
    client.close()
    record = http.get("/sim/requests", params={"path": "/v1/chat/completions"}).json()
    assert record[-1]["priority"] is None


def test_metrics_use_llamacpp_names(http: httpx.Client) -> None:
    http.post("/completion", json={"prompt": "a b c", "n_predict": 3})
    text = http.get("/metrics").text
    names = {line.split(" ")[0] for line in text.splitlines() if not line.startswith("#")}
    assert names == set(LLAMA_METRICS)
    assert "vllm:" not in text
    values = {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in text.splitlines()
        if line[0] != "#"
    }
    assert values["llamacpp:tokens_predicted_total"] == 3
    assert values["llamacpp:prompt_tokens_total"] == 3


def test_unknown_routes_answer_like_llama_server(http: httpx.Client) -> None:
    answer = http.get("/lora-adapters")
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == 404


def test_api_key_guards_everything_but_the_public_routes() -> None:
    with SimProcess("--personality", "llama-server", "--api-key", "k1", "--speed", "0") as sim:
        assert httpx.get(sim.url + "/health").status_code == 200
        assert httpx.get(sim.url + "/v1/models").status_code == 200
        for path in ("/slots", "/props", "/metrics"):
            refused = httpx.get(sim.url + path)
            assert refused.status_code == 401
            assert refused.json()["error"]["message"] == "Invalid API Key"
        assert (
            httpx.get(sim.url + "/slots", headers={"Authorization": "Bearer k1"}).status_code == 200
        )
        assert httpx.get(sim.url + "/sim/stats").status_code == 200
