"""Reading the client's request: size and time bounds, JSON shape, operator caps."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fairgate.core.errors import BadRequest, PayloadTooLarge
from fairgate.proxy.request import Caps, ClientGone, check_caps, parse_json, read_body

CAPS = Caps(max_body_bytes=100, body_timeout=0.2, max_n=4, max_grammar_bytes=50)


def receiver(*messages: dict[str, Any], then_wait: bool = False) -> Any:
    queue = list(messages)

    async def receive() -> dict[str, Any]:
        if queue:
            return queue.pop(0)
        if then_wait:
            await asyncio.sleep(10)
        return {"type": "http.disconnect"}

    return receive


async def test_body_in_pieces_is_joined() -> None:
    receive = receiver(
        {"type": "http.request", "body": b"ab", "more_body": True},
        {"type": "http.request", "body": b"cd", "more_body": False},
    )
    assert await read_body(receive, None, CAPS) == b"abcd"


async def test_declared_length_over_the_limit_is_refused_before_reading() -> None:
    with pytest.raises(PayloadTooLarge):
        await read_body(receiver(), 101, CAPS)


async def test_streamed_body_over_the_limit_is_refused() -> None:
    receive = receiver(*[{"type": "http.request", "body": b"x" * 40, "more_body": True}] * 3)
    with pytest.raises(PayloadTooLarge):
        await read_body(receive, None, CAPS)


async def test_trickled_body_hits_the_deadline() -> None:
    receive = receiver({"type": "http.request", "body": b"x", "more_body": True}, then_wait=True)
    with pytest.raises(BadRequest) as caught:
        await read_body(receive, None, CAPS)
    assert caught.value.code == "body_timeout"


async def test_client_gone_while_reading() -> None:
    receive = receiver({"type": "http.request", "body": b"x", "more_body": True})
    with pytest.raises(ClientGone):
        await read_body(receive, None, CAPS)


@pytest.mark.parametrize("body", [b"{", b"[1,2]", b'"s"', b""])
def test_non_object_json_is_a_400(body: bytes) -> None:
    with pytest.raises(BadRequest):
        parse_json(body)


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        ({"n": 5}, "n_too_large"),
        ({"n": 0}, "invalid_value"),
        ({"n": True}, "invalid_value"),
        ({"best_of": 5}, "n_too_large"),
        ({"best_of": -1}, "invalid_value"),
        # llama-server's own name for n, read before n: its completions are as many
        ({"n": 1, "n_cmpl": 5}, "n_too_large"),
        ({"n_cmpl": 0}, "invalid_value"),
        ({"stream": "yes"}, "invalid_value"),
        ({"guided_regex": "a" * 51}, "grammar_too_large"),
        (
            {"response_format": {"type": "json_schema", "schema": {"x": "y" * 60}}},
            "grammar_too_large",
        ),
    ],
)
def test_caps_refuse_with_a_named_reason(payload: dict[str, Any], code: str) -> None:
    with pytest.raises(BadRequest) as caught:
        check_caps(payload, CAPS)
    assert caught.value.code == code


def test_values_within_the_caps_pass() -> None:
    check_caps({"n": 4, "max_tokens": 1000, "stream": True, "guided_regex": "a+"}, CAPS)


def test_with_several_fields_out_of_bounds_the_first_in_order_is_named() -> None:
    # counts before "stream", "stream" before grammars, whatever the body's own order
    with pytest.raises(BadRequest) as caught:
        check_caps({"guided_regex": "a" * 51, "stream": "yes", "n": 0}, CAPS)
    assert (caught.value.code, caught.value.message) == (
        "invalid_value",
        "'n' must be a positive integer",
    )
    with pytest.raises(BadRequest) as caught:
        check_caps({"guided_regex": "a" * 51, "stream": 1}, CAPS)
    assert (caught.value.code, caught.value.message) == (
        "invalid_value",
        "'stream' must be true or false",
    )
