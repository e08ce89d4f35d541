"""Usage read from whole answers: only the usage object is parsed, whatever precedes it."""

from __future__ import annotations

import orjson

from fairgate.proxy.usage import Usage, usage_in_body


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
