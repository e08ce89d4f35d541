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
