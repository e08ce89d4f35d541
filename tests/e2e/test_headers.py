"""What the engine receives: built from scratch, never the client's headers or steering fields.

Read from the simulator's own record of each request. A vLLM engine gets a
re-encoded body without the fields that would let a client steer it, and the
headers of the upstream header table only (the internal key as Authorization);
llama-server and generic OpenAI engines get the client's body byte for byte.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import openai
import orjson
import pytest
from tests.e2e.conftest import TEST_KEY, model, write_config
from tests.e2e.raw_client import raw_request, request_bytes

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess

pytestmark = pytest.mark.slow

INTERNAL_KEY = "sk-engine-7d41e0c9b2"
ALLOWED = {
    "host",
    "content-type",
    "accept",
    "authorization",
    "x-request-id",
    "accept-encoding",
    "content-length",
}
HOSTILE_HEADERS = [
    ("Authorization", f"Bearer {TEST_KEY}"),
    ("X-Vllm-Priority", "-100"),
    ("X-Forwarded-For", "10.1.2.3"),
    ("X-Forwarded-Host", "attacker.example"),
    ("X-Forwarded-Proto", "https"),
    ("Forwarded", "for=10.1.2.3;proto=https"),
    ("X-Real-Ip", "10.1.2.3"),
    ("Keep-Alive", "timeout=600"),
    ("TE", "trailers"),
    ("Trailer", "X-Checksum"),
    ("Upgrade", "h2c"),
    ("Proxy-Connection", "keep-alive"),
    ("Proxy-Authorization", "Basic dXNlcjpwYXNz"),
    ("Cookie", "session=abc123"),
    ("X-Custom", "anything"),
    ("X-Request-Id", "chosen-by-client"),
    ("User-Agent", "client-agent/1.0"),
    ("Accept-Encoding", "gzip, br"),
    ("Accept", "application/json"),
    ("Content-Type", "application/json"),
]
# Duplicate keys, an escaped spelling and every field vLLM must not see from a client.
HOSTILE_BODY = (
    b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,'
    b' "priority": -50, "priority": -60, "\\u0070riority": -70, "cache_salt": "tenant-b",'
    b' "kv_transfer_params": {"do_remote_decode": true}, "ec_transfer_params": {},'
    b' "vllm_xargs": {"x": 1}, "request_id": "chosen", "extra_body": {"priority": -1}}'
)
FORBIDDEN_FIELDS = {
    "priority",
    "cache_salt",
    "kv_transfer_params",
    "ec_transfer_params",
    "vllm_xargs",
    "request_id",
    "extra_body",
}


@dataclass(frozen=True, slots=True)
class Env:
    keyed: SimProcess  # vLLM personality with --api-key: models m (vllm) and o (openai)
    llama: SimProcess  # llama-server personality: model l
    gateway: GatewayProcess


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    directory = tmp_path_factory.mktemp("gw")
    key_file = directory / "engine.key"
    key_file.write_text(INTERNAL_KEY + "\n")
    with ExitStack() as stack:
        keyed = stack.enter_context(
            SimProcess("--speed", "0", "--model", "m", "--model", "o", "--api-key", INTERNAL_KEY)
        )
        llama = stack.enter_context(
            SimProcess("--speed", "0", "--model", "l", "--personality", "llama-server")
        )
        upstream = [{"name": "r0", "url": keyed.url, "key_file": str(key_file)}]
        config = write_config(
            directory,
            [
                model("m", upstreams=upstream),
                model("o", engine="openai", upstreams=upstream),
                model("l", llama, engine="llama-server", aliases=["alias-l"]),
            ],
        )
        yield Env(keyed, llama, stack.enter_context(GatewayProcess(config)))


@pytest.fixture(autouse=True)
def _fresh(env: Env) -> None:
    env.keyed.reset()
    env.llama.reset()


def headers_of(record: dict[str, Any]) -> dict[str, str]:
    names = [name.lower() for name, _ in record["headers"]]
    assert len(names) == len(set(names)), f"a header was sent twice: {names}"
    return {name.lower(): value for name, value in record["headers"]}


def assert_clean_headers(
    record: dict[str, Any],
    request_id: str | None,
    sim: SimProcess,
    *,
    key: bool,
    encoding: str = "identity",
) -> dict[str, str]:
    sent = headers_of(record)
    assert set(sent) <= ALLOWED, set(sent) - ALLOWED
    assert sent["host"] == f"127.0.0.1:{sim.port}"
    # the client's "gzip, br": only the coding the gateway can read is asked for, and a
    # stream is always asked for uncompressed
    assert sent["accept-encoding"] == encoding
    assert request_id and sent["x-request-id"] == request_id  # the gateway's id, not the client's
    assert sent.get("authorization") == (f"Bearer {INTERNAL_KEY}" if key else None)
    return sent


def test_vllm_gets_neither_client_headers_nor_steering_fields(env: Env) -> None:
    answer = raw_request(
        env.gateway.url,
        request_bytes("POST", "/v1/chat/completions", headers=HOSTILE_HEADERS, body=HOSTILE_BODY),
    )
    assert answer.status == 200, answer.body  # the engine accepted the internal key
    (record,) = env.keyed.requests(path="/v1/chat/completions")
    sent = assert_clean_headers(
        record, answer.header("x-request-id"), env.keyed, key=True, encoding="gzip"
    )
    assert sent["content-type"] == "application/json" and sent["accept"] == "application/json"
    body = record["body"]
    document = orjson.loads(body)
    # the client's cache_salt is replaced by the gateway's own (a 256-bit HMAC, base64url)
    # the output cap the gateway reserved is written into both of chat's cap fields
    assert set(document) == {
        "model",
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "cache_salt",
    }
    assert document["max_tokens"] == document["max_completion_tokens"]
    assert len(document["cache_salt"]) == 43
    assert "priority" not in body and "\\u" not in body and "chosen" not in body
    assert record["priority"] == 0  # the engine scheduled it at the default priority


def test_vllm_through_the_sdk_extra_body_and_headers_are_dropped(env: Env) -> None:
    client = openai.OpenAI(base_url=env.gateway.url + "/v1", api_key=TEST_KEY, max_retries=0)
    stream = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=2,
        stream=True,
        extra_headers={"X-Vllm-Priority": "-9", "X-Forwarded-For": "10.9.9.9", "Cookie": "a=b"},
        extra_body={
            "priority": -9,
            "vllm_xargs": {"k": "v"},
            "cache_salt": "mine",
            "kv_transfer_params": {"remote": True},
            "request_id": "mine",
        },
    )
    response_id = stream.response.headers.get("x-request-id")
    assert len([c for c in stream if c.choices and c.choices[0].delta.content]) == 2
    (record,) = env.keyed.requests(path="/v1/chat/completions")
    assert_clean_headers(record, response_id, env.keyed, key=True)
    document = orjson.loads(record["body"])
    assert FORBIDDEN_FIELDS & set(document) == {"cache_salt"}
    assert document["cache_salt"] != "mine"  # the gateway's own salt, not the client's
    assert document["stream_options"] == {"include_usage": True}
    assert record["priority"] == 0


@pytest.mark.parametrize("stream", [False, True])
def test_llama_server_gets_the_body_byte_for_byte(env: Env, stream: bool) -> None:
    raw = (
        b'{ "model" : "l",\n  "messages":[{"role":"user","content":"caf\\u00e9 \\ud83d\\ude00"}],'
        b'\t"n_predict": 2, "max_tokens": 2, "max_tokens": 3, "priority": 5, "cache_salt": "x",'
        b' "stream": ' + (b"true" if stream else b"false") + b" }"
    )
    answer = raw_request(
        env.gateway.url,
        request_bytes("POST", "/v1/chat/completions", headers=HOSTILE_HEADERS, body=raw),
    )
    assert answer.status == 200, answer.body
    (record,) = env.llama.requests()
    assert record["body"].encode() == raw
    encoding = "identity" if stream else "gzip"
    assert_clean_headers(
        record, answer.header("x-request-id"), env.llama, key=False, encoding=encoding
    )
    if stream:
        assert b"include_usage" not in answer.body  # nothing injected


def test_openai_engine_gets_the_body_byte_for_byte_with_the_internal_key(env: Env) -> None:
    raw = b'{"messages":[{"content":"hi","role":"user"}],  "model":"o","max_tokens":2,"x":1,"x":2}'
    answer = raw_request(
        env.gateway.url,
        request_bytes("POST", "/v1/chat/completions", headers=HOSTILE_HEADERS, body=raw),
    )
    assert answer.status == 200, answer.body
    (record,) = env.keyed.requests(path="/v1/chat/completions")
    assert record["body"].encode() == raw
    assert_clean_headers(
        record, answer.header("x-request-id"), env.keyed, key=True, encoding="gzip"
    )


def test_an_alias_on_a_byte_for_byte_engine_replaces_only_the_model(env: Env) -> None:
    raw = b'{"model": "alias-l", "prompt": "hi", "n_predict": 2, "priority": 5}'
    answer = raw_request(
        env.gateway.url,
        request_bytes(
            "POST", "/completion", headers=[("Content-Type", "application/json")], body=raw
        ),
    )
    assert answer.status == 200, answer.body
    (record,) = env.llama.requests()
    assert orjson.loads(record["body"]) == {**orjson.loads(raw), "model": "l"}
