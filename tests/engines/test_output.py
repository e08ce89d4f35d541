"""The output bound of one request: every way a body can ask for more output is counted."""

from __future__ import annotations

from typing import Any

import pytest

from fairgate.core.errors import BadRequest
from fairgate.engines import adapter_for
from fairgate.engines.output import (
    MAX_CAP,
    NO_OUTPUT,
    UNCAPPED,
    Bound,
    Output,
    bound,
    count_prompts,
)

CHAT = adapter_for("vllm").endpoint("/v1/chat/completions").output  # type: ignore[union-attr]
COMPLETION = adapter_for("vllm").endpoint("/v1/completions").output  # type: ignore[union-attr]
LLAMA = adapter_for("llama-server").endpoint("/completion").output  # type: ignore[union-attr]
LLAMA_CHAT = adapter_for("llama-server").endpoint("/v1/chat/completions").output  # type: ignore[union-attr]
ANY_CHAT = adapter_for("openai").endpoint("/v1/chat/completions").output  # type: ignore[union-attr]
LLAMA_RESPONSES = adapter_for("llama-server").endpoint("/v1/responses").output  # type: ignore[union-attr]


def _bound(
    body: dict[str, Any], output: Output, *, writable: bool, ceiling: int | None = 1000
) -> Bound:
    return bound(body, output, ceiling=ceiling, default=300, writable=writable, max_prompts=16)


def test_the_module_example() -> None:
    route = Output(("max_tokens",), prompts=("prompt",))
    body = {"prompt": ["a", "b", "c"], "n": 2, "max_tokens": 10}
    assert bound(body, route, ceiling=100, default=50, writable=True, max_prompts=16) == Bound(
        6, 10
    )


def test_a_rewritten_body_without_a_cap_gets_the_default_never_above_the_ceiling() -> None:
    assert _bound({}, CHAT, writable=True) == Bound(1, 300)
    assert _bound({}, CHAT, writable=True, ceiling=200) == Bound(1, 200)
    assert _bound({"max_tokens": 50}, CHAT, writable=True) == Bound(1, 50)


def test_the_engine_s_own_precedence_picks_the_cap_of_a_rewritten_body() -> None:
    # vLLM reads max_completion_tokens before max_tokens
    assert _bound({"max_tokens": 900, "max_completion_tokens": 5}, CHAT, writable=True).cap == 5


def test_a_relayed_body_is_bound_by_its_largest_cap_field_whichever_the_engine_prefers() -> None:
    # llama-server prefers n_predict, but the bound must hold if it read max_tokens
    assert _bound({"n_predict": 5, "max_tokens": 900}, LLAMA, writable=False).cap == 900
    assert _bound({"max_tokens": 7}, LLAMA, writable=False).cap == 7


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({}, "max_tokens_required"),  # llama-server would run to the end of its context
        ({"n_predict": -1}, "invalid_value"),  # llama-server's "no limit"
        ({"n_predict": 5000}, "max_tokens_too_large"),  # n_predict wins over a small max_tokens
        ({"n_predict": 5000, "max_tokens": 10}, "max_tokens_too_large"),
        ({"max_completion_tokens": 10}, "max_tokens_required"),  # not read by native routes
        ({"max_tokens": 10, "min_tokens": 11}, "invalid_value"),
        ({"max_tokens": True}, "invalid_value"),
        ({"prompt": ["x"] * 17, "max_tokens": 1}, "too_many_prompts"),
    ],
)
def test_a_relayed_body_that_cannot_be_bounded_is_refused(body: dict[str, Any], code: str) -> None:
    with pytest.raises(BadRequest) as refused:
        _bound(body, LLAMA, writable=False)
    assert refused.value.code == code
    assert refused.value.status == 400


def test_llama_chat_needs_a_cap_every_build_reads_and_counts_the_newer_field_too() -> None:
    """llama-server builds before early 2026 ignore ``max_completion_tokens``: a body capped
    by it alone ran to the end of the context, reserved at its value."""
    with pytest.raises(BadRequest) as refused:
        _bound({"max_completion_tokens": 1, "ignore_eos": True}, LLAMA_CHAT, writable=False)
    assert refused.value.code == "max_tokens_required"
    # newer builds read it (before max_tokens): a larger value still bounds the request
    both = {"max_completion_tokens": 500, "max_tokens": 10}
    assert _bound(both, LLAMA_CHAT, writable=False).cap == 500
    assert _bound({"n_predict": 20}, LLAMA_CHAT, writable=False).cap == 20


def test_llama_responses_count_n_predict_which_the_engine_reads_first() -> None:
    body = {"input": "hi", "max_output_tokens": 1, "n_predict": 200}
    assert _bound(body, LLAMA_RESPONSES, writable=False).cap == 200
    assert _bound({"input": "hi", "max_tokens": 30}, LLAMA_RESPONSES, writable=False).cap == 30
    # the chat request it becomes reads max_completion_tokens on newer builds: counted, and
    # held to the ceiling like the others
    newer = {"input": "hi", "max_output_tokens": 10, "max_completion_tokens": 900}
    assert _bound(newer, LLAMA_RESPONSES, writable=False).cap == 900
    with pytest.raises(BadRequest) as refused:
        _bound({**newer, "max_completion_tokens": 100_000}, LLAMA_RESPONSES, writable=False)
    assert refused.value.code == "max_tokens_too_large"


def test_behind_a_generic_server_n_predict_raises_the_bound_but_bounds_nothing_alone() -> None:
    """``engine: openai`` may front a llama.cpp server, which reads ``n_predict`` first:
    ``{max_tokens: 1, n_predict: 900}`` was reserved one token."""
    assert _bound({"max_tokens": 1, "n_predict": 900}, ANY_CHAT, writable=False).cap == 900
    with pytest.raises(BadRequest) as refused:
        _bound({"n_predict": 5}, ANY_CHAT, writable=False)  # an OpenAI server ignores it
    assert refused.value.code == "max_tokens_required"


def test_the_refusal_names_the_fields_and_the_ceiling() -> None:
    with pytest.raises(BadRequest, match="set 'n_predict' or 'max_tokens'"):
        _bound({}, LLAMA_CHAT, writable=False)
    with pytest.raises(BadRequest, match="at most 1000"):
        _bound({}, LLAMA_CHAT, writable=False)


def test_a_cap_above_the_ceiling_is_refused_even_where_the_gateway_rewrites() -> None:
    with pytest.raises(BadRequest, match="'max_tokens' must be at most 1000"):
        _bound({"max_tokens": 1001}, CHAT, writable=True)


def test_batches_n_and_best_of_multiply_the_sequences() -> None:
    assert _bound({"prompt": ["a"] * 10, "max_tokens": 4}, COMPLETION, writable=True) == Bound(
        10, 4
    )
    assert _bound({"prompt": "a", "n": 3}, COMPLETION, writable=True) == Bound(3, 300)
    assert _bound({"best_of": 4, "n": 2, "max_tokens": 1}, COMPLETION, writable=True) == Bound(4, 1)
    # llama-server reads n_cmpl before n: a request for one and three completions runs three
    assert _bound({"n": 1, "n_cmpl": 3, "max_tokens": 2}, COMPLETION, writable=True) == Bound(3, 2)
    assert Bound(12, 5).tokens(assumed=100) == 60


def test_prompts_are_counted_like_the_engine_runs_them() -> None:
    assert count_prompts("one") == 1
    assert count_prompts([1, 2, 3]) == 1  # one prompt of token ids
    assert count_prompts([[1, 2], [3]]) == 2
    assert count_prompts(["a", "b"]) == 2
    assert count_prompts([]) == 1
    assert count_prompts(None) == 1


def test_routes_without_output_reserve_nothing_and_audio_assumes() -> None:
    assert _bound({"input": ["a"] * 100}, NO_OUTPUT, writable=False) == Bound(0, 0)
    assert _bound({}, UNCAPPED, writable=False) == Bound(1, None)
    assert Bound(1, None).tokens(assumed=256) == 256


def test_vllm_prompt_embeddings_run_a_sequence_each_beside_the_prompts() -> None:
    """``prompt_embeds`` (vLLM, --enable-prompt-embeds) is a batch field too: a list of
    embeddings bypassed the prompts cap and was reserved as one sequence."""
    embeds = {"prompt_embeds": ["AAAA"] * 3, "max_tokens": 10}
    assert _bound(embeds, COMPLETION, writable=True) == Bound(3, 10)
    both = {"prompt": ["a", "b"], "prompt_embeds": "AAAA", "max_tokens": 10}
    assert _bound(both, COMPLETION, writable=True) == Bound(3, 10)
    with pytest.raises(BadRequest) as refused:
        _bound({"prompt_embeds": ["AAAA"] * 17, "max_tokens": 1}, COMPLETION, writable=True)
    assert refused.value.code == "too_many_prompts"
    assert refused.value.message == "'prompt_embeds' may hold at most 16 prompts, this one has 17"


def test_a_cap_past_any_context_is_refused_with_no_ceiling_configured() -> None:
    """10**19 passed as a cap when no ceiling was set: its cost overflowed the state back
    end's counters, and the limits script's failure opened the breaker for everyone."""
    with pytest.raises(BadRequest) as refused:
        _bound({"max_tokens": 10**19}, CHAT, writable=True, ceiling=None)
    assert refused.value.code == "max_tokens_too_large"
    assert refused.value.message == f"'max_tokens' must be at most {MAX_CAP}"
    assert _bound({"max_tokens": MAX_CAP}, CHAT, writable=True, ceiling=None).cap == MAX_CAP
