"""The request head: the caller's headers as given, host and content-length added, and
nothing that could smuggle a header of its own."""

from __future__ import annotations

import pytest

from fairgate.upstream.request_head import RequestHeadEncoder

HOST = b"10.0.0.11:8000"


def encode_request(
    method: str, target: bytes, headers: list[tuple[bytes, bytes]], host: bytes, length: int
) -> tuple[bytes, bool]:
    return RequestHeadEncoder().encode(method, target, headers, host, length)


def test_headers_go_out_as_given_with_host_and_length_added() -> None:
    head, close = encode_request("POST", b"/v1/chat", [(b"X-A", b"1"), (b"x-b", b"")], HOST, 7)
    assert head == (
        b"POST /v1/chat HTTP/1.1\r\nX-A: 1\r\nx-b: \r\nhost: 10.0.0.11:8000\r\n"
        b"content-length: 7\r\n\r\n"
    )
    assert close is False


def test_a_given_host_is_kept_and_bodiless_get_has_no_length() -> None:
    head, _ = encode_request("GET", b"/health", [(b"HOST", b"engine")], HOST, 0)
    assert head == b"GET /health HTTP/1.1\r\nHOST: engine\r\n\r\n"
    head, _ = encode_request("DELETE", b"/x", [], HOST, 0)
    assert b"content-length: 0\r\n" in head


def test_connection_close_is_reported() -> None:
    _, close = encode_request("GET", b"/", [(b"Connection", b"Close")], HOST, 0)
    assert close is True


@pytest.mark.parametrize(
    "headers",
    [
        [(b"x-a", b"v\r\nx-injected: 1")],
        [(b"x-a", b"v\nx-injected: 1")],
        [(b"x-a", b"v\rx")],
        [(b"x-a", b"v\x00")],
        [(b"x a", b"v")],
        [(b"x-a:", b"v")],
        [(b"", b"v")],
    ],
)
def test_unsafe_headers_are_refused_without_echoing_the_value(
    headers: list[tuple[bytes, bytes]],
) -> None:
    with pytest.raises(ValueError) as caught:
        encode_request("POST", b"/", headers, HOST, 0)
    assert b"injected" not in str(caught.value).encode()


@pytest.mark.parametrize("name", [b"Content-Length", b"transfer-encoding"])
def test_framing_headers_belong_to_the_client(name: bytes) -> None:
    with pytest.raises(ValueError, match="set by the client"):
        encode_request("POST", b"/", [(name, b"5")], HOST, 5)


@pytest.mark.parametrize(
    ("method", "target"),
    [("PO ST", b"/"), ("GET\r\n", b"/"), ("GÉT", b"/"), ("GET", b"/a b"), ("GET", b"/\r\n")],
)
def test_method_and_target_must_be_valid(method: str, target: bytes) -> None:
    with pytest.raises(ValueError, match=r"method|target"):
        encode_request(method, target, [], HOST, 0)


def test_checks_hold_for_names_and_methods_seen_before() -> None:
    encoder = RequestHeadEncoder(max_names=1)
    encoder.encode("POST", b"/", [(b"x-a", b"ok"), (b"Host", b"h")], HOST, 0)
    with pytest.raises(ValueError):
        encoder.encode("POST", b"/", [(b"x-a", b"bad\r\nx-b: 1")], HOST, 0)
    head, _ = encoder.encode("POST", b"/", [(b"Host", b"h")], HOST, 0)
    assert head == b"POST / HTTP/1.1\r\nHost: h\r\ncontent-length: 0\r\n\r\n"
    with pytest.raises(ValueError):
        encoder.encode("POST", b"/", [(b"Content-Length", b"1")], HOST, 0)
