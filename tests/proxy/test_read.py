"""The read stage (``proxy.read``): the head scanned once, the endpoint, then the body,
the model with its reservation and request policies, the cache salt and the tags.

The model table is built from a real configuration file with the engine adapters the
gateway uses, as in test_endpoints.py.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import orjson
import pytest
from tests.proxy.tables import endpoint_table

from fairgate.core.errors import BadRequest, NotFound
from fairgate.core.principal import Principal
from fairgate.proxy.exchange import Exchange
from fairgate.proxy.read import Read
from fairgate.proxy.request import Caps
from fairgate.proxy.reservation import OutputPolicy
from fairgate.proxy.tags import TagPolicy

CONFIG = """\
models:
  - name: chat
    engine: vllm
    upstreams: [{name: v0, url: "http://127.0.0.1:8000"}]
"""
CAPS = Caps(max_body_bytes=10_000, body_timeout=1.0, max_n=4, max_grammar_bytes=100)
ALICE = Principal("key-alice", "org-a", "team-a", tags=("lab",))


@pytest.fixture
def read(tmp_path: Path) -> Read:
    return Read(
        endpoint_table(CONFIG, tmp_path),
        CAPS,
        OutputPolicy(ceilings={"chat": 512}, default=256, assumed=256, max_prompts=8),
        tags=TagPolicy(allowed=frozenset({"run-7"})),
        salt=lambda p: f"salt-of-{p.org}",
    )


def scope(*headers: tuple[bytes, bytes], path: str = "/v1/chat/completions") -> dict[str, Any]:
    return {"type": "http", "method": "POST", "path": path, "headers": list(headers)}


def exchange() -> Exchange:
    ex = Exchange("r1", "POST", "/v1/chat/completions", 0.0, principal=ALICE)
    ex.endpoint = "/v1/chat/completions"
    ex.content_type = b"application/json"
    return ex


def receiving(body: dict[str, Any] | bytes) -> Any:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": raw, "more_body": False}

    return receive


def test_the_head_is_read_in_one_pass_and_every_credential_counted(read: Read) -> None:
    ex = exchange()
    found = read.head(
        scope(
            (b"authorization", b"Bearer fg-one"),
            (b"content-type", b"application/json"),
            (b"content-length", b"42"),
            (b"x-session-id", b"s-1"),
            (b"x-fairgate-tags", b"run-7"),
            (b"x-api-key", b"fg-two"),  # a second credential: the identify stage refuses
            (b"authorization", b"Bearer fg-three"),
        ),
        ex,
    )
    assert found == (b"Bearer fg-one", b"42", b"run-7")  # the first Authorization
    assert ex.credentials == 3
    assert (ex.content_type, ex.session, ex.body_unread) == (b"application/json", b"s-1", True)


def test_an_announced_empty_body_is_not_waited_for(read: Read) -> None:
    ex = exchange()
    read.head(scope((b"content-length", b"0")), ex)
    assert ex.body_unread is False


def test_the_endpoint_is_named_on_the_exchange_and_an_unknown_path_is_404(read: Read) -> None:
    ex = exchange()
    ex.endpoint = ""
    assert read.endpoint(scope(), ex).name == ex.endpoint == "/v1/chat/completions"
    with pytest.raises(NotFound):
        read.endpoint(scope(path="/slots"), exchange())  # an engine-internal route


async def test_the_body_gives_the_model_its_reservation_salt_and_tags(read: Read) -> None:
    ex = exchange()
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 9}
    entry = await read.body(receiving(body), ex, None, b"run-7")
    assert [m.name for m in entry.chain] == ["chat"]
    assert ex.requested_model == "chat"
    assert ex.reservation is not None and ex.reservation.completion_tokens == 9
    assert ex.cache_salt == "salt-of-org-a"
    assert ex.tags == ("lab", "run-7")  # the key's own, then the header's
    assert ex.body_unread is False and ex.stream is False


async def test_a_stream_asking_for_usage_is_noted(read: Read) -> None:
    ex = exchange()
    body = {
        "model": "chat",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    await read.body(receiving(body), ex, None, None)
    assert (ex.stream, ex.client_wants_usage) == (True, True)
    assert ex.tags is None  # no header: the key's own tags apply, later


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"not json", "invalid_json"),
        ({"model": "chat", "messages": [], "n": 5}, "n_too_large"),  # over the operator's cap
        ({"model": "chat", "messages": [], "max_tokens": 5000}, "max_tokens_too_large"),
    ],
)
async def test_a_body_over_its_bounds_is_refused(
    read: Read, body: dict[str, Any] | bytes, code: str
) -> None:
    with pytest.raises(BadRequest) as refused:
        await read.body(receiving(body), exchange(), None, None)
    assert orjson.loads(refused.value.body())["error"]["code"] == code


async def test_a_tag_the_key_may_not_send_is_refused(read: Read) -> None:
    body = {"model": "chat", "messages": []}
    with pytest.raises(BadRequest) as refused:
        await read.body(receiving(body), exchange(), None, b"someone-elses-project")
    assert orjson.loads(refused.value.body())["error"]["code"] == "tag_not_allowed"


async def test_a_field_the_engine_policy_denies_is_refused_and_logged(
    read: Read, caplog: pytest.LogCaptureFixture
) -> None:
    body = {"model": "chat", "messages": [], "chat_template": "{{ secrets }}"}
    with caplog.at_level(logging.INFO, "fairgate.proxy"), pytest.raises(BadRequest) as refused:
        await read.body(receiving(body), exchange(), None, None)
    assert orjson.loads(refused.value.body())["error"]["code"] == "field_not_allowed"
    assert "chat_template" in caplog.text and "r1" in caplog.text


async def test_a_declared_length_that_is_not_a_number_is_refused(read: Read) -> None:
    with pytest.raises(BadRequest):
        await read.body(receiving({"model": "chat"}), exchange(), b"12abc", None)
