"""Upstream headers are built from scratch: nothing else reaches the engine."""

from __future__ import annotations

import pytest

from fairgate.core.errors import BadRequest
from fairgate.engines import upstream_headers


def _headers(**overrides: object) -> list[tuple[bytes, bytes]]:
    kwargs: dict[str, object] = {
        "internal_key": "sk-internal",
        "content_type": b"application/json",
        "accept": b"text/event-stream",
        "request_id": "req-1",
        "priority": 10,
        "host": b"10.0.0.11:8000",
    }
    kwargs.update(overrides)
    return upstream_headers(**kwargs)  # type: ignore[arg-type]


def test_exactly_the_documented_headers_in_order() -> None:
    assert _headers() == [
        (b"host", b"10.0.0.11:8000"),
        (b"content-type", b"application/json"),
        (b"accept", b"text/event-stream"),
        (b"authorization", b"Bearer sk-internal"),
        (b"x-request-id", b"req-1"),
        (b"x-vllm-priority", b"10"),
        (b"accept-encoding", b"identity"),
    ]


def test_optional_headers_are_left_out_not_emptied() -> None:
    assert _headers(internal_key=None, content_type=None, accept=None, priority=None) == [
        (b"host", b"10.0.0.11:8000"),
        (b"x-request-id", b"req-1"),
        (b"accept-encoding", b"identity"),
    ]
    assert (b"authorization", b"Bearer ") not in _headers(internal_key="")


def test_priority_zero_and_negative_are_sent() -> None:
    assert (b"x-vllm-priority", b"0") in _headers(priority=0)
    assert (b"x-vllm-priority", b"-3") in _headers(priority=-3)


@pytest.mark.parametrize(
    "value",
    [b"application/json\r\nX-Vllm-Priority: -100", b"text/plain\x00", b"a\nb"],
)
def test_client_values_with_control_characters_are_refused(value: bytes) -> None:
    with pytest.raises(BadRequest):
        _headers(content_type=value)
    with pytest.raises(BadRequest):
        _headers(accept=value)


@pytest.mark.parametrize("field", ["internal_key", "request_id"])
def test_gateway_values_with_control_characters_are_configuration_errors(field: str) -> None:
    with pytest.raises(ValueError):
        _headers(**{field: "abc\r\nx: y"})
    with pytest.raises(ValueError):
        _headers(**{field: "clé"})


def test_blank_client_values_are_dropped() -> None:
    names = [name for name, _ in _headers(content_type=b"  ", accept=b"")]
    assert b"content-type" not in names
    assert b"accept" not in names


@pytest.mark.parametrize(
    ("client", "upstream"),
    [
        (None, b"identity"),
        (b"", b"identity"),
        (b"gzip, br", b"gzip"),
        (b"br, zstd", b"identity"),
        (b"deflate, GZIP;q=0.5, gzip", b"deflate, gzip"),
        (b"x-gzip", b"gzip"),
        (b"gzip;q=0, deflate", b"deflate"),
        (b"gzip; q=0.0", b"identity"),
        (b"*", b"identity"),
    ],
)
def test_only_codings_the_gateway_can_read_are_asked_for(
    client: bytes | None, upstream: bytes
) -> None:
    assert (b"accept-encoding", upstream) in _headers(accept_encoding=client)
