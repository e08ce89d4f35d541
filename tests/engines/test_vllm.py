"""vLLM body rewrite: client steering fields never reach the engine."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from fairgate.core.errors import BadRequest
from fairgate.engines import STRIPPED_FIELDS, UpstreamRequestBody, adapter_for

VLLM = adapter_for("vllm")


def _rewrite(raw: bytes, **kwargs: Any) -> dict[str, Any]:
    """What vLLM receives for ``raw``, parsed the way the proxy parses (orjson, once)."""
    kwargs.setdefault("upstream_model", "meta/llama-70b")
    body = UpstreamRequestBody(raw=raw, parsed=orjson.loads(raw), **kwargs)
    sent: dict[str, Any] = orjson.loads(VLLM.prepare_body(body))
    return sent


def test_adapter_declares_it_rewrites() -> None:
    assert VLLM.rewrites_body


@pytest.mark.parametrize("field", sorted(STRIPPED_FIELDS))
def test_each_steering_field_is_removed_and_the_rest_kept(field: str) -> None:
    raw = orjson.dumps(
        {"model": "llama70b", "messages": [{"role": "user", "content": "hi"}], field: 7}
    )
    sent = _rewrite(raw)
    assert field not in sent
    assert sent["messages"] == [{"role": "user", "content": "hi"}]


def test_the_stripped_set_is_the_documented_one() -> None:
    assert {
        "priority",
        "cache_salt",
        "kv_transfer_params",
        "ec_transfer_params",
        "vllm_xargs",
        "request_id",
        "extra_body",
    } == STRIPPED_FIELDS


def test_escaped_spellings_and_duplicate_keys_cannot_smuggle_a_priority() -> None:
    raw = (
        b'{"model":"llama70b","prompt":"x",'
        b'"\\u0070riority":-100,"priority":-5,"priority":-9,'
        b'"cache\\u005fsalt":"victim-salt","\\u0076llm_xargs":{"a":1},'
        b'"kv_transfer_params":{"do_remote_prefill":true}}'
    )
    sent = _rewrite(raw, cache_salt="tenant-salt")
    assert "priority" not in sent
    assert "vllm_xargs" not in sent
    assert "kv_transfer_params" not in sent
    assert sent["cache_salt"] == "tenant-salt"
    assert b"riority" not in VLLM.prepare_body(
        UpstreamRequestBody(raw=raw, parsed=orjson.loads(raw), upstream_model="m")
    )


def test_duplicate_keys_collapse_to_the_last_value() -> None:
    raw = b'{"model":"a","temperature":0.1,"temperature":0.9,"prompt":"x"}'
    sent_bytes = VLLM.prepare_body(
        UpstreamRequestBody(raw=raw, parsed=orjson.loads(raw), upstream_model="m")
    )
    assert sent_bytes.count(b"temperature") == 1
    assert orjson.loads(sent_bytes)["temperature"] == 0.9


def test_model_is_replaced_by_the_upstream_id() -> None:
    sent = _rewrite(b'{"model":"llama70b","prompt":"x"}', client_model="llama70b")
    assert sent["model"] == "meta/llama-70b"


def test_unknown_and_sampling_fields_are_kept_verbatim() -> None:
    doc = {
        "model": "m",
        "prompt": "x",
        "max_tokens": 16,
        "logprobs": 2,
        "structured_outputs": {"choice": ["a", "b"]},
        "nested": {"priority": 3},  # only the top level is stripped
    }
    sent = _rewrite(orjson.dumps(doc))
    assert sent == {**doc, "model": "meta/llama-70b"}


def test_streams_get_include_usage_and_keep_the_clients_other_options() -> None:
    raw = orjson.dumps(
        {"model": "m", "stream": True, "stream_options": {"continuous_usage_stats": True}}
    )
    sent = _rewrite(raw, stream=True, include_usage=True)
    assert sent["stream_options"] == {"continuous_usage_stats": True, "include_usage": True}


def test_include_usage_overrides_a_client_false() -> None:
    raw = orjson.dumps({"model": "m", "stream": True, "stream_options": {"include_usage": False}})
    sent = _rewrite(raw, stream=True, include_usage=True)
    assert sent["stream_options"] == {"include_usage": True}


def test_include_usage_added_when_the_client_sent_no_stream_options() -> None:
    sent = _rewrite(b'{"model":"m","stream":true}', stream=True, include_usage=True)
    assert sent["stream_options"] == {"include_usage": True}


def test_no_stream_options_without_a_stream_or_without_the_gateway_asking() -> None:
    assert "stream_options" not in _rewrite(b'{"model":"m"}', stream=False, include_usage=True)
    assert "stream_options" not in _rewrite(b'{"model":"m","stream":true}', stream=True)


def test_no_salt_unless_the_gateway_gives_one() -> None:
    assert "cache_salt" not in _rewrite(b'{"model":"m","cache_salt":"mine"}')


def test_an_unparsed_json_body_is_parsed_here() -> None:
    raw = b'{"model":"m","priority":-1,"prompt":"x"}'
    body = UpstreamRequestBody(raw=raw, parsed=None, upstream_model="up")
    assert orjson.loads(VLLM.prepare_body(body)) == {"model": "up", "prompt": "x"}


@pytest.mark.parametrize("raw", [b"not json", b"[1, 2]", b'"priority"'])
def test_a_body_that_cannot_be_rewritten_is_refused_not_forwarded(raw: bytes) -> None:
    with pytest.raises(BadRequest):
        VLLM.prepare_body(UpstreamRequestBody(raw=raw, parsed=None, upstream_model="m"))


def test_an_empty_body_stays_empty() -> None:
    assert VLLM.prepare_body(UpstreamRequestBody(raw=b"", parsed=None, upstream_model="m")) == b""


def _form(*fields: tuple[str, bytes], boundary: bytes = b"b0undary") -> bytes:
    out = b""
    for name, value in fields:
        filename = b'; filename="a.wav"' if name == "file" else b""
        out += b"--" + boundary + b"\r\n"
        out += b'Content-Disposition: form-data; name="' + name.encode() + b'"' + filename
        out += b"\r\n\r\n" + value + b"\r\n"
    return out + b"--" + boundary + b"--\r\n"


def test_multipart_forms_lose_steering_fields_and_get_the_upstream_model() -> None:
    raw = _form(
        ("model", b"whisper"),
        ("file", b"RIFF\x00\x01audio"),
        ("vllm_xargs", b'{"a": 1}'),
        ("priority", b"-100"),
        ("language", b"en"),
    )
    body = UpstreamRequestBody(
        raw=raw,
        parsed=None,
        upstream_model="openai/whisper-large-v3",
        client_model="whisper",
        content_type=b"multipart/form-data; boundary=b0undary",
    )
    sent = VLLM.prepare_body(body)
    assert sent == _form(
        ("model", b"openai/whisper-large-v3"),
        ("file", b"RIFF\x00\x01audio"),
        ("language", b"en"),
    )


def test_priority_header_only_from_the_gateway() -> None:
    headers = VLLM.headers(
        internal_key=None,
        content_type=b"application/json",
        accept=None,
        request_id="r1",
        priority=12,
        host=b"10.0.0.1:8000",
    )
    assert (b"x-vllm-priority", b"12") in headers
    no_priority = VLLM.headers(
        internal_key=None,
        content_type=None,
        accept=None,
        request_id="r1",
        priority=None,
        host=b"h",
    )
    assert all(name != b"x-vllm-priority" for name, _ in no_priority)


def test_the_reserved_cap_is_written_into_every_cap_field_of_the_route() -> None:
    # a client that omits the cap, or asks the engine to ignore EOS, still stops at the cap
    raw = orjson.dumps({"model": "m", "messages": [], "ignore_eos": True, "max_tokens": 9000})
    fields = ("max_completion_tokens", "max_tokens")
    sent = _rewrite(raw, max_tokens=64, cap_fields=fields)
    assert (sent["max_tokens"], sent["max_completion_tokens"], sent["ignore_eos"]) == (64, 64, True)
    assert "max_tokens" not in _rewrite(b'{"model":"m","messages":[]}')  # no cap decided: none
