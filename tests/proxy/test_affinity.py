"""routing_inputs: the session key and the prompt's prefix hashes routing reads of a request."""

from __future__ import annotations

from typing import Any

import pytest

from fairgate.core.principal import Principal
from fairgate.proxy.affinity import routing_inputs
from fairgate.proxy.exchange import Exchange
from fairgate.routing import prefix_hashes

SYSTEM = "You answer questions about the manual. " * 30  # 1170 characters: 4 whole blocks
ALICE = Principal(key_id="key-alice", org="acme", team="lab")


def exchange(parsed: Any = None, route: str = "/v1/chat/completions", **fields: Any) -> Exchange:
    ex = Exchange(request_id="r", method="POST", path=route, started=0.0, endpoint=route)
    ex.principal = fields.pop("principal", ALICE)
    ex.parsed = parsed
    for name, value in fields.items():
        setattr(ex, name, value)
    return ex


def chat(*messages: tuple[str, Any]) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": r, "content": c} for r, c in messages]}


def test_the_session_header_wins_over_the_key() -> None:
    assert routing_inputs(exchange(session=b"conversation-9"))[0] == "conversation-9"
    assert routing_inputs(exchange())[0] == "key-alice"
    assert routing_inputs(exchange(session=b""))[0] == "key-alice"
    assert routing_inputs(exchange(principal=None)) == (None, ())


def test_chat_turns_sharing_a_system_prompt_share_its_blocks() -> None:
    _, one = routing_inputs(exchange(chat(("system", SYSTEM), ("user", "first question"))))
    _, two = routing_inputs(exchange(chat(("system", SYSTEM), ("user", "another one"))))
    _, other = routing_inputs(exchange(chat(("system", SYSTEM.upper()), ("user", "first"))))
    assert len(one) == len(two) == 4
    assert one == two  # the questions lie past the last whole block
    assert not set(one) & set(other)
    # The role is part of the prompt, as in the engine's template.
    _, as_user = routing_inputs(exchange(chat(("user", SYSTEM))))
    assert as_user[0] != one[0]


def test_text_parts_count_and_an_image_ends_the_prefix() -> None:
    parts = [{"type": "text", "text": SYSTEM[:600]}, {"type": "text", "text": SYSTEM[600:]}]
    _, split = routing_inputs(exchange(chat(("system", parts))))
    _, whole = routing_inputs(exchange(chat(("system", SYSTEM))))
    assert split == whole
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    _, stopped = routing_inputs(exchange(chat(("user", [{"type": "text", "text": "hi"}, image]))))
    assert stopped == ()
    with_image = chat(("system", SYSTEM), ("user", [image]), ("user", "x" * 4000))
    _, prefix = routing_inputs(exchange(with_image))
    assert prefix == whole  # nothing after the image is hashed


def test_completion_prompts_text_tokens_and_batches() -> None:
    route = "/v1/completions"
    _, text = routing_inputs(exchange({"prompt": SYSTEM}, route))
    assert text == prefix_hashes(SYSTEM)
    tokens = list(range(600))
    _, ids = routing_inputs(exchange({"prompt": tokens}, route))
    assert ids == prefix_hashes(tokens)
    _, batch = routing_inputs(exchange({"prompt": [SYSTEM, "other"]}, route))
    assert batch == text
    assert routing_inputs(exchange({"prompt": [True] * 600}, route))[1] == ()
    assert routing_inputs(exchange({"prompt": 5}, route))[1] == ()


def test_responses_read_instructions_then_input() -> None:
    route = "/v1/responses"
    _, plain = routing_inputs(exchange({"instructions": SYSTEM, "input": "hello"}, route))
    items = [{"role": "user", "content": [{"type": "input_text", "text": "hello"}]}]
    _, listed = routing_inputs(exchange({"instructions": SYSTEM, "input": items}, route))
    assert len(plain) == 4
    assert plain == listed
    assert routing_inputs(exchange({"input": "x" * 5000}, "/v1/embeddings"))[1] == ()


def test_the_cache_salt_keeps_tenants_apart() -> None:
    body = chat(("system", SYSTEM))
    _, none = routing_inputs(exchange(body))
    _, acme = routing_inputs(exchange(body, cache_salt="c2FsdC1h"))
    _, other = routing_inputs(exchange(body, cache_salt="c2FsdC1i"))
    assert len({none[0], acme[0], other[0]}) == 3
    assert routing_inputs(exchange(body, cache_salt="c2FsdC1h"))[1] == acme


def test_the_work_is_bounded_and_can_be_skipped() -> None:
    huge = chat(("system", "y" * 5_000_000))
    _, hashes = routing_inputs(exchange(huge), max_blocks=8)
    assert len(hashes) == 8
    assert routing_inputs(exchange(huge), prefix=False) == ("key-alice", ())
    assert routing_inputs(exchange(chat(("user", "short"))))[1] == ()  # under one block
    assert routing_inputs(exchange("not a mapping"))[1] == ()


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "assistant", "tool_calls": [{"id": "1"}], "content": None}],
        ["not a message"],
        [{"role": "user", "content": 42}],
    ],
)
def test_what_cannot_be_read_ends_the_prefix(messages: list[Any]) -> None:
    body = {"messages": [{"role": "system", "content": SYSTEM}, *messages, {"content": "z" * 3000}]}
    _, hashes = routing_inputs(exchange(body))
    assert hashes == routing_inputs(exchange(chat(("system", SYSTEM))))[1]
