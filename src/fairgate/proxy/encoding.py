"""Compressed answers, read without trusting their size, and the internal-key scrub.

An engine's compressed answer is relayed to the client as it came, with its
``Content-Encoding``; the gateway still reads it, for two reasons: the usage
the client is charged, and the internal key, which an engine may echo (an
error quoting its ``Authorization`` header) and which must never reach a
client. So a copy is decompressed, never more than a limit (a small gzip body
can expand a thousandfold: a decompression bomb must not take the gateway's
memory), and:

- an error answer (status ≥ 400) is relayed decompressed, the key replaced;
- a success is relayed compressed, as it came, unless the copy or the
  compressed bytes hold the key (a gzip header's file name and comment are not
  compressed, and decompressing drops them): then it too is relayed
  decompressed, the key replaced;
- an answer larger than the limit once decompressed, or one that does not
  decompress, is not relayed at all (502): it could not be checked.

    >>> scrub(b'{"error": "bad key sk-1"}', b"sk-1")
    b'{"error": "bad key [redacted]"}'
"""

from __future__ import annotations

import zlib

__all__ = ["REDACTED", "TooLarge", "Undecodable", "decode", "is_encoded", "scrub"]

REDACTED = b"[redacted]"

# zlib window bits: 16 + 15 reads a gzip member; 15 a zlib stream (HTTP "deflate");
# -15 a raw deflate stream, which some servers send as "deflate" all the same.
_GZIP = 16 + zlib.MAX_WBITS
_ZLIB = zlib.MAX_WBITS
_RAW = -zlib.MAX_WBITS


class Undecodable(Exception):
    """The body is not valid in its content coding, or the coding is not one the gateway
    reads (only ``gzip`` and ``deflate`` are ever asked for)."""


class TooLarge(Exception):
    """The body decompresses to more than the limit."""


def is_encoded(coding: bytes | None) -> bool:
    """Whether a ``Content-Encoding`` value means the body is not the plain bytes."""
    return coding is not None and coding.strip().lower() not in (b"", b"identity")


def decode(body: bytes, coding: bytes | None, limit: int) -> bytes:
    """``body`` without its content coding, at most ``limit`` bytes (``TooLarge`` past it,
    ``Undecodable`` for a broken body or another coding); the body itself if not encoded.

    Memory is bounded by ``limit`` whatever the body holds: at most ``limit + 1``
    bytes are ever decompressed.
    """
    if not is_encoded(coding):
        return body
    assert coding is not None
    name = coding.strip().lower()
    if name in (b"gzip", b"x-gzip"):
        return _inflate(body, (_GZIP,), limit)
    if name == b"deflate":
        return _inflate(body, (_ZLIB, _RAW), limit)
    raise Undecodable("a content coding the gateway does not read")


def _inflate(body: bytes, formats: tuple[int, ...], limit: int) -> bytes:
    for wbits in formats:
        try:
            return _members(body, wbits, limit)
        except zlib.error:
            continue
    raise Undecodable("the body does not decompress")


def _members(body: bytes, wbits: int, limit: int) -> bytes:
    """Every member of a (possibly concatenated) stream, bounded in total by ``limit``."""
    out = bytearray()
    data = body
    while True:
        inflater = zlib.decompressobj(wbits)
        out += inflater.decompress(data, limit + 1 - len(out))
        if len(out) > limit:
            raise TooLarge("the body decompresses past the limit")
        if not inflater.eof:
            if inflater.unconsumed_tail:
                raise TooLarge("the body decompresses past the limit")
            raise Undecodable("the body ends before its compressed stream does")
        data = inflater.unused_data
        if not data or wbits != _GZIP:
            if data:
                raise Undecodable("bytes after the compressed stream")
            return bytes(out)


def scrub(data: bytes, key: bytes | None) -> bytes:
    """``data`` with every occurrence of ``key`` replaced by ``[redacted]``."""
    if key and key in data:
        return data.replace(key, REDACTED)
    return data
