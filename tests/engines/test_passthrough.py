"""llama-server and openai kinds: the client's bytes reach the engine unchanged."""

from __future__ import annotations

import orjson
import pytest

from fairgate.core.errors import BadRequest
from fairgate.engines import UpstreamRequestBody, adapter_for

KINDS = ["llama-server", "openai"]

# Odd but valid JSON: whitespace, key order, escapes, duplicate keys, big floats.
RAW = (
    b'{ "model" : "qwen",\n  "prompt":"caf\\u00e9",  "temperature" : 1.50,'
    b'"n_probs":3,"n_probs":4, "stream":true, "id_slot": 1 }'
)


@pytest.mark.parametrize("kind", KINDS)
def test_body_is_relayed_byte_for_byte(kind: str) -> None:
    adapter = adapter_for(kind)
    body = UpstreamRequestBody(
        raw=RAW,
        parsed=orjson.loads(RAW),
        upstream_model="qwen",
        client_model="qwen",
        stream=True,
        include_usage=True,
        cache_salt="ignored-salt",
    )
    sent = adapter.prepare_body(body)
    assert sent == RAW
    assert sent is RAW  # not even copied
    assert not adapter.rewrites_body


@pytest.mark.parametrize("kind", KINDS)
def test_an_alias_replaces_only_the_model(kind: str) -> None:
    adapter = adapter_for(kind)
    raw = b'{"model":"fast","prompt":"x","stream":true,"priority":3}'
    body = UpstreamRequestBody(
        raw=raw,
        parsed=orjson.loads(raw),
        upstream_model="Qwen/Qwen3-8B",
        client_model="fast",
        stream=True,
        include_usage=True,
        cache_salt="s",
    )
    assert orjson.loads(adapter.prepare_body(body)) == {
        "model": "Qwen/Qwen3-8B",
        "prompt": "x",
        "stream": True,
        "priority": 3,
    }


@pytest.mark.parametrize("kind", KINDS)
def test_an_alias_in_a_multipart_form_replaces_only_the_model_field(kind: str) -> None:
    raw = (
        b"--XyZ\r\n"
        b'Content-Disposition: form-data; name="file"; filename="a.wav"\r\n'
        b"Content-Type: audio/wav\r\n\r\n"
        b"RIFF\r\n--X not a boundary\r\n"
        b"--XyZ\r\n"
        b'Content-Disposition: form-data; name="model"\r\n\r\n'
        b"whisper\r\n"
        b"--XyZ--\r\n"
    )
    body = UpstreamRequestBody(
        raw=raw,
        parsed=None,
        upstream_model="whisper-large-v3",
        client_model="whisper",
        content_type=b"multipart/form-data; boundary=XyZ",
    )
    assert adapter_for(kind).prepare_body(body) == raw.replace(
        b"\r\n\r\nwhisper\r\n", b"\r\n\r\nwhisper-large-v3\r\n"
    )


@pytest.mark.parametrize("kind", KINDS)
def test_no_model_means_untouched(kind: str) -> None:
    body = UpstreamRequestBody(raw=b"", parsed=None, upstream_model="m", client_model=None)
    assert adapter_for(kind).prepare_body(body) == b""


def test_an_alias_on_an_unreadable_body_is_refused() -> None:
    body = UpstreamRequestBody(
        raw=b"model=fast", parsed=None, upstream_model="m", client_model="fast"
    )
    with pytest.raises(BadRequest):
        adapter_for("llama-server").prepare_body(body)


@pytest.mark.parametrize("kind", KINDS)
def test_no_priority_header_even_when_one_is_decided(kind: str) -> None:
    headers = adapter_for(kind).headers(
        internal_key="k",
        content_type=b"application/json",
        accept=b"text/event-stream",
        request_id="r",
        priority=0,
        host=b"h:1",
    )
    assert all(name != b"x-vllm-priority" for name, _ in headers)
