"""Parsing request bodies: priorities, salts, lengths, and vLLM's refusals."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from fairgate.core.errors import BadRequest, NotFound
from fairgate.sim.config import SimConfig
from fairgate.sim.inputs import InputParser
from fairgate.sim.process import SimProcess
from fairgate.sim.tokenizer import Tokenizer

CHAT: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hello there"}]}


def _parser(**overrides: Any) -> InputParser:
    config = SimConfig(models=("m",), **overrides)
    return InputParser(config, Tokenizer())


def test_the_header_priority_overrides_the_body() -> None:
    parser = _parser()
    assert parser.chat({**CHAT, "priority": 7}, None).priority == 7
    assert parser.chat({**CHAT, "priority": 7}, b"-3").priority == -3
    assert parser.chat(CHAT, None).priority == 0


@pytest.mark.parametrize("header", [b"high", b"1.5", b""])
def test_a_header_that_is_not_an_integer_is_400(header: bytes) -> None:
    with pytest.raises(BadRequest, match="X-Vllm-Priority"):
        _parser().chat(CHAT, header)


def test_fcfs_rejects_a_non_zero_priority_like_vllm() -> None:
    parser = _parser(scheduling_policy="fcfs")
    assert parser.chat({**CHAT, "priority": 0}, None).priority == 0
    with pytest.raises(BadRequest) as caught:
        parser.chat({**CHAT, "priority": 4}, None)
    assert caught.value.message == "Got priority 4 but Priority scheduling is not enabled."
    with pytest.raises(BadRequest):
        parser.completion({"model": "m", "prompt": "x"}, b"2")


def test_cache_salt_must_be_a_non_empty_string() -> None:
    parser = _parser()
    assert parser.chat({**CHAT, "cache_salt": "org-a"}, None).salt == "org-a"
    for bad in ("", 5):
        with pytest.raises(BadRequest, match="cache_salt"):
            parser.chat({**CHAT, "cache_salt": bad}, None)


def test_lengths_default_cap_and_overflow() -> None:
    parser = _parser(kv_blocks=4, block_size=4, max_tokens_default=100)
    gen = parser.chat(CHAT, None)
    assert len(gen.prompt) == 5 and gen.max_tokens == 11 and not gen.explicit_max
    assert parser.chat({**CHAT, "max_tokens": 11}, None).explicit_max
    with pytest.raises(BadRequest, match="maximum context length is 16 tokens"):
        parser.chat({**CHAT, "max_tokens": 12}, None)
    with pytest.raises(BadRequest):
        parser.chat({**CHAT, "max_tokens": 0}, None)


def test_stream_options_need_stream() -> None:
    parser = _parser()
    with pytest.raises(BadRequest, match="stream=True"):
        parser.chat({**CHAT, "stream_options": {"include_usage": True}}, None)
    gen = parser.chat({**CHAT, "stream": True, "stream_options": {"include_usage": True}}, None)
    assert gen.stream and gen.include_usage


def test_unknown_models_and_several_choices_are_refused() -> None:
    parser = _parser()
    with pytest.raises(NotFound, match=r"The model `other` does not exist\."):
        parser.chat({**CHAT, "model": "other"}, None)
    with pytest.raises(BadRequest, match="n must be 1"):
        parser.chat({**CHAT, "n": 2}, None)
    assert parser.chat({key: v for key, v in CHAT.items() if key != "model"}, None).model == "m"


def test_prompts_as_text_or_token_ids_but_one_at_a_time() -> None:
    parser = _parser()
    assert parser.completion({"prompt": [4, 5, 6]}, None).prompt == [4, 5, 6]
    assert parser.completion({"prompt": ["a b"]}, None).prompt == Tokenizer().encode("a b")
    for bad in (["a", "b"], [], "", [1, "x"]):
        with pytest.raises(BadRequest):
            parser.completion({"prompt": bad}, None)


def test_responses_input_and_instructions() -> None:
    parser = _parser()
    short = parser.responses({"input": "hi"}, None)
    longer = parser.responses({"input": "hi", "instructions": "Be brief."}, None)
    assert len(longer.prompt) > len(short.prompt)
    items = [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]
    assert parser.responses({"input": items}, None).prompt == short.prompt
    assert parser.responses({"input": "hi", "max_output_tokens": 3}, None).max_tokens == 3


def test_the_llama_personality_ignores_model_priority_and_salt() -> None:
    parser = _parser(personality="llama-server")
    gen = parser.chat({**CHAT, "model": "anything", "priority": 5, "cache_salt": "s"}, b"9")
    assert (gen.model, gen.priority, gen.salt) == ("anything", None, None)
    native = parser.llama_completion({"prompt": "a b c", "n_predict": 2}, infill=False)
    assert native.max_tokens == 2 and native.explicit_max
    infill = parser.llama_completion({"input_prefix": "def f(", "input_suffix": ")"}, infill=True)
    assert len(infill.prompt) == 4


def test_the_llama_personality_reads_n_predict_first_on_the_openai_routes_too() -> None:
    """As llama-server does: a gateway that bounds such a body by ``max_tokens`` alone
    would reserve less than the engine generates."""
    parser = _parser(personality="llama-server")
    assert parser.chat({**CHAT, "n_predict": 5, "max_tokens": 2}, None).max_tokens == 5
    assert parser.completion({"prompt": "a", "n_predict": 3}, None).max_tokens == 3
    assert not parser.chat({**CHAT, "n_predict": -1, "max_tokens": 2}, None).explicit_max
    # vLLM has no n_predict
    assert _parser().chat({**CHAT, "n_predict": 5, "max_tokens": 2}, None).max_tokens == 2


def test_embedding_inputs() -> None:
    parser = _parser()
    assert parser.embedding_inputs({"input": "a b"}) == [Tokenizer().encode("a b")]
    assert parser.embedding_inputs({"input": [[1, 2], [3]]}) == [[1, 2], [3]]
    with pytest.raises(BadRequest):
        parser.embedding_inputs({"input": [1, "a"]})


@pytest.fixture(scope="module")
def fcfs() -> Iterator[SimProcess]:
    with SimProcess("--scheduling-policy", "fcfs", "--speed", "200", "--ttft", "0") as sim:
        yield sim


@pytest.mark.slow
def test_an_fcfs_engine_answers_400_to_a_priority(fcfs: SimProcess) -> None:
    url = fcfs.url + "/v1/chat/completions"
    body = {**CHAT, "model": "sim-model", "max_tokens": 2}
    answer = httpx.post(url, json={**body, "priority": 10})
    assert answer.status_code == 400
    assert answer.json()["error"] == {
        "message": "Got priority 10 but Priority scheduling is not enabled.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
    assert httpx.post(url, json=body, headers={"X-Vllm-Priority": "1"}).status_code == 400
    assert httpx.post(url, json=body, headers={"X-Vllm-Priority": "0"}).status_code == 200
