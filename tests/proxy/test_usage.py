"""Usage read from whole answers: only the usage object is parsed, whatever precedes it."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from fairgate.proxy.usage import Usage, usage_from, usage_in_body


def test_usage_after_a_large_embedding_is_found() -> None:
    body = orjson.dumps(
        {
            "data": [{"embedding": [0.125] * 50_000, "index": 0}],
            "usage": {"prompt_tokens": 7, "total_tokens": 7},
        }
    )
    assert usage_in_body(body) == Usage(7, 0, 0)


def test_nested_details_and_responses_shape() -> None:
    chat = orjson.dumps(
        {
            "choices": [],
            "usage": {
                "prompt_tokens": 10,
                "completion_tokens": 3,
                "prompt_tokens_details": {"cached_tokens": 4},
            },
        }
    )
    assert usage_in_body(chat) == Usage(10, 3, 4)
    spaced = b'{"usage" : { "input_tokens": 2, "output_tokens": 5 } }'
    assert usage_in_body(spaced) == Usage(2, 5, 0)


def test_a_string_mentioning_usage_does_not_confuse_it() -> None:
    body = orjson.dumps(
        {
            "choices": [{"message": {"content": 'say "usage": {'}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 2},
        }
    )
    assert usage_in_body(body) == Usage(1, 2, 0)
    assert usage_in_body(b'{"choices": [{"text": "\\"usage\\" {"}]}') is None


def test_no_usage_is_none() -> None:
    assert usage_in_body(b'{"choices": []}') is None
    assert usage_in_body(b"not json") is None


def test_a_native_llama_answer_reports_its_own_fields() -> None:
    body = orjson.dumps(
        {
            "content": "hi",
            "stop": True,
            "tokens_predicted": 30,
            "tokens_evaluated": 12,
            "timings": {"prompt_n": 4, "cache_n": 8, "predicted_n": 30},
        }
    )
    assert usage_in_body(body) == Usage(12, 30, 8)


def test_a_native_llama_batch_adds_every_prompt_and_needs_them_all() -> None:
    one = {"content": "a", "tokens_predicted": 5, "tokens_evaluated": 2}
    two = {"content": "b", "tokens_predicted": 7, "tokens_evaluated": 3}
    assert usage_in_body(orjson.dumps([one, two])) == Usage(5, 12, 0)
    # a result without its figures makes the whole answer's usage unknown (the reservation)
    assert usage_in_body(orjson.dumps([one, {"content": "c"}])) is None


def test_usage_followed_by_other_fields_as_vllm_writes_it() -> None:
    # vLLM puts fields after usage (prompt_logprobs, kv_transfer_params): the cut ends
    # at usage's own closing brace, not the body's
    body = (
        b'{"id":"c1","choices":[],"usage":{"prompt_tokens":12,"total_tokens":15,'
        b'"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":8}},'
        b'"prompt_logprobs":null,"kv_transfer_params":{"a":{"b":1}}}'
    )
    assert usage_in_body(body) == Usage(12, 3, 8)


def test_a_usage_object_too_long_to_cut_is_read_from_the_whole_body() -> None:
    body = orjson.dumps(
        {"usage": {"prompt_tokens": 5, "completion_tokens": 6, "padding": [0] * 3000}}
    )
    assert usage_in_body(body) == Usage(5, 6, 0)


_COUNTS = st.integers(min_value=0, max_value=10**9)
_DETAILS = st.one_of(
    st.none(), st.fixed_dictionaries({"cached_tokens": _COUNTS}), st.just({"nested": {"x": 1}})
)


@given(
    prompt=_COUNTS,
    completion=_COUNTS,
    details=_DETAILS,
    before=st.dictionaries(st.sampled_from(["id", "object", "choices"]), _COUNTS),
    after=st.dictionaries(
        st.sampled_from(["prompt_logprobs", "kv_transfer_params", "service_tier"]),
        st.one_of(st.none(), _COUNTS, st.just({"k": {"v": [1, {"w": 2}]}})),
    ),
)
def test_the_cut_reads_what_parsing_the_whole_body_reads(
    prompt: int, completion: int, details: Any, before: dict[str, Any], after: dict[str, Any]
) -> None:
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion}
    if details is not None:
        usage["prompt_tokens_details"] = details
    body = orjson.dumps({**before, "usage": usage, **after})
    expected = usage_from(orjson.loads(body)["usage"])
    assert usage_in_body(body) == expected
    # cut short after the usage object, the body no longer parses whole: only the cut
    # of the usage object alone can read it
    assert usage_in_body(body[:-1]) == expected
