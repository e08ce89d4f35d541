"""Which endpoint a request calls and which configured models may serve it (``proxy.endpoints``).

The table is built from a real configuration file, with the engine adapters the gateway uses.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from tests.proxy.tables import endpoint_table

from fairgate.core.errors import NotFound
from fairgate.core.principal import Principal
from fairgate.engines import FieldRefused
from fairgate.proxy.endpoints import EndpointTable
from fairgate.proxy.exchange import Exchange

CONFIG = """\
models:
  - name: chat
    engine: vllm
    aliases: [chat-latest]
    fallbacks: [local]
    upstreams: [{name: v0, url: "http://127.0.0.1:8000"}]
  - name: local
    engine: llama-server
    upstreams: [{name: l0, url: "http://127.0.0.1:8001"}]
  - name: only-vllm
    engine: vllm
    upstreams: [{name: v1, url: "http://127.0.0.1:8002"}]
"""


@pytest.fixture
def table(tmp_path: Path) -> EndpointTable:
    return endpoint_table(CONFIG, tmp_path)


def request(table: EndpointTable, path: bytes, model: str) -> Exchange:
    ex = Exchange("r1", "POST", path.decode(), 0.0, principal=Principal("k", "o", "t"))
    ex.endpoint = table.resolve_path(path).name
    ex.body = orjson.dumps({"model": model, "prompt": "x"})
    ex.parsed = orjson.loads(ex.body)
    ex.content_type = b"application/json"
    return ex


def refusal(error: NotFound) -> tuple[int, str]:
    return error.status, orjson.loads(error.body())["error"]["code"]


def test_an_endpoint_the_models_engine_lacks_answers_404_unknown_route(
    table: EndpointTable,
) -> None:
    # /v1/infill is llama-server's: a vLLM model (without a llama-server fallback) has none
    ex = request(table, b"/v1/infill", "only-vllm")
    with pytest.raises(NotFound) as refused:
        table.model_for(ex)
    assert refusal(refused.value) == (404, "unknown_route")


def test_only_the_models_of_the_chain_whose_engine_has_the_endpoint_serve_it(
    table: EndpointTable,
) -> None:
    ex = request(table, b"/v1/infill", "chat-latest")
    entry = table.model_for(ex)
    assert [c.name for c in entry.chain] == ["local"]  # the vLLM model itself is left out
    assert (ex.client_model, ex.requested_model) == ("chat-latest", "chat")
    ex = request(table, b"/v1/chat/completions", "chat")
    assert [c.name for c in table.model_for(ex).chain] == ["chat", "local"]


@pytest.mark.parametrize(
    "path",
    [b"/slots", b"/v1/../slots", b"/v1/..%2fslots", b"/metrics", b"/v1/nothing-here"],
)
def test_a_path_no_configured_engine_serves_is_404_unknown_route(
    table: EndpointTable, path: bytes
) -> None:
    with pytest.raises(NotFound) as refused:
        table.resolve_path(path)
    assert refusal(refused.value) == (404, "unknown_route")


def test_a_path_is_named_by_its_normal_spelling(table: EndpointTable) -> None:
    assert table.resolve_path(b"/V1//chat/./completions/").name == "/v1/chat/completions"


def test_a_model_the_key_may_not_use_answers_as_one_that_does_not_exist(
    table: EndpointTable,
) -> None:
    ex = request(table, b"/v1/chat/completions", "only-vllm")
    ex.principal = Principal("k", "o", "t", models=frozenset({"chat"}))
    with pytest.raises(NotFound) as refused:
        table.model_for(ex)
    unknown = request(table, b"/v1/chat/completions", "no-such-model")
    with pytest.raises(NotFound) as missing:
        table.model_for(unknown)
    assert refusal(refused.value) == refusal(missing.value) == (404, "model_not_found")
    assert "only-vllm" in refused.value.message


@pytest.mark.parametrize(
    ("fields", "refused"),
    [
        ({}, None),
        ({"temperature": 0.5, "stream": False}, None),
        ({"id_slot": 3}, "id_slot"),  # denied by the fallback's engine only (llama-server)
        ({"chat_template": "x"}, "chat_template"),  # denied by the model's own (vLLM)
        ({"extra_body": {"prompt_embeds": "x"}}, "prompt_embeds"),
        ({"extra_body": {"temperature": 1}}, None),
        ({"top_logprobs": 50}, "top_logprobs"),
    ],
)
def test_every_model_of_the_chain_checks_the_body_fields(
    table: EndpointTable, fields: dict[str, object], refused: str | None
) -> None:
    ex = request(table, b"/v1/chat/completions", "chat")
    ex.parsed = {**(ex.parsed or {}), **fields}
    entry = table.model_for(ex)
    if refused is None:
        entry.check_fields(ex)
        return
    with pytest.raises(FieldRefused) as caught:
        entry.check_fields(ex)
    assert caught.value.field == refused


def test_a_path_resolves_the_same_when_asked_again(table: EndpointTable) -> None:
    for _ in range(2):
        assert table.resolve_path(b"/v1//chat/completions").name == "/v1/chat/completions"
        with pytest.raises(NotFound):
            table.resolve_path(b"/v1/../slots")  # a refusal is refused every time
    long = b"/v1/chat/completions" + b"/." * 400  # not held, resolved each time alike
    assert table.resolve_path(long).name == table.resolve_path(long).name


def test_the_chain_is_cut_to_the_models_the_key_may_use(table: EndpointTable) -> None:
    ex = request(table, b"/v1/chat/completions", "chat")
    assert [c.name for c in table.model_for(ex).chain] == ["chat", "local"]
    ex.principal = Principal("k", "o", "t", models=frozenset({"chat"}))
    assert [c.name for c in table.model_for(ex).chain] == ["chat"]
    # the route's cut is remembered, the key's is made per request
    ex.principal = Principal("k", "o", "t")
    assert [c.name for c in table.model_for(ex).chain] == ["chat", "local"]
    ex = request(table, b"/v1/infill", "chat")
    ex.principal = Principal("k", "o", "t", models=frozenset({"chat"}))
    with pytest.raises(NotFound) as refused:
        table.model_for(ex)  # the only model serving /v1/infill is one the key may not use
    assert refusal(refused.value) == (404, "unknown_route")
