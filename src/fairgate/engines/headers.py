"""Upstream request headers, built from scratch for every request.

Nothing the client sent reaches the engine except its ``Content-Type`` and
``Accept``: not its ``Authorization``, not ``X-Vllm-Priority``, not
``X-Forwarded-*``, cookies or hop-by-hop headers. The gateway adds exactly:

    host              the replica's host (from config)
    content-type      the client's, when it sent one
    accept            the client's, when it sent one
    authorization     "Bearer <internal key>", only when the replica has a key
    x-request-id      the gateway's request id
    x-vllm-priority   the fair-share priority (vLLM only, when decided)
    accept-encoding   the codings of the client's Accept-Encoding the gateway can read
                      (``gzip``, ``deflate``), else "identity"; streams always get
                      "identity", since the relay reads each event

A compressed answer is relayed as it came, with its ``Content-Encoding``; the
gateway decompresses a bounded copy only to read the usage and to look for
the internal key (``proxy.relay``). A coding it could not read (``br``,
``zstd``) is never asked for, so an answer can always be checked.
"""

from __future__ import annotations

import functools
import re

from fairgate.core.errors import BadRequest

__all__ = ["accepted_encoding", "upstream_headers"]

# Visible ASCII, space and tab: RFC 9110 field-value without obs-text. Anything
# else (CR, LF, NUL) could split a header in a lenient server.
_FIELD_VALUE = re.compile(rb"[\x21-\x7e]([\x20-\x7e\t]*[\x21-\x7e])?")


def _valid(value: bytes) -> bool:
    return _FIELD_VALUE.fullmatch(value) is not None


# Remembered per value (bounded; a refusal raises and is never kept): a client sends the
# same few content types and accepts, and a replica's host and key are its own.
@functools.lru_cache(maxsize=256)
def _client_value(name: str, value: bytes) -> bytes | None:
    value = value.strip(b" \t")
    if not value:
        return None
    if not _valid(value):
        raise BadRequest(f"the {name} header holds characters that are not allowed")
    return value


@functools.lru_cache(maxsize=256)
def _replica_value(name: str, value: str | bytes) -> bytes:
    return _gateway_value(name, value)


def _gateway_value(name: str, value: str | bytes) -> bytes:
    try:
        raw = value.encode("ascii") if isinstance(value, str) else value
    except UnicodeEncodeError:
        raise ValueError(f"{name} is not a valid header value") from None
    if not _valid(raw):
        raise ValueError(f"{name} is not a valid header value")
    return raw


_READABLE_CODINGS = (b"gzip", b"deflate")


def accepted_encoding(value: bytes | None) -> bytes:
    """The upstream ``Accept-Encoding`` for a client's: the readable codings it accepts
    (in its order, ``q=0`` ones left out), or ``identity``.

    >>> accepted_encoding(b"br, gzip;q=0.8, deflate;q=0")
    b'gzip'
    """
    if not value:
        return b"identity"
    chosen: list[bytes] = []
    for item in value.split(b","):
        coding, _, params = item.partition(b";")
        coding = coding.strip().lower()
        if coding == b"x-gzip":
            coding = b"gzip"
        refused = params.replace(b" ", b"").lower() in (b"q=0", b"q=0.0", b"q=0.00", b"q=0.000")
        if coding in _READABLE_CODINGS and coding not in chosen and not refused:
            chosen.append(coding)
    return b", ".join(chosen) if chosen else b"identity"


def upstream_headers(
    *,
    internal_key: str | None,
    content_type: bytes | None,
    accept: bytes | None,
    request_id: str,
    priority: int | None,
    host: bytes,
    accept_encoding: bytes | None = None,
) -> list[tuple[bytes, bytes]]:
    """The complete header list of one upstream request, names in lower case.

    ``priority`` is written as ``x-vllm-priority`` when not ``None``; callers
    for other engine kinds pass ``None``. ``accept_encoding`` is the client's
    ``Accept-Encoding`` (``None`` for a stream or when it sent none). Raises ``BadRequest`` when the
    client's content type or accept value holds control characters, and
    ``ValueError`` when a gateway-made value does (a configuration error).
    """
    headers = [(b"host", _replica_value("host", host))]
    if (
        content_type is not None
        and (ctype := _client_value("Content-Type", content_type)) is not None
    ):
        headers.append((b"content-type", ctype))
    if accept is not None and (acc := _client_value("Accept", accept)) is not None:
        headers.append((b"accept", acc))
    if internal_key:
        key = _replica_value("internal key", internal_key)
        headers.append((b"authorization", b"Bearer " + key))
    headers.append((b"x-request-id", _gateway_value("request id", request_id)))
    if priority is not None:
        headers.append((b"x-vllm-priority", str(int(priority)).encode()))
    headers.append((b"accept-encoding", accepted_encoding(accept_encoding)))
    return headers
