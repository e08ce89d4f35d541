"""Compressed answers decompressed within a bound, and the internal-key scrub."""

from __future__ import annotations

import gzip
import zlib

import pytest

from fairgate.proxy.encoding import REDACTED, TooLarge, Undecodable, decode, is_encoded, scrub

BODY = b'{"usage": {"prompt_tokens": 3, "completion_tokens": 2}}'


def gz(data: bytes) -> bytes:
    """gzip with a fixed header time: the same bytes in every process (test ids included)."""
    return gzip.compress(data, mtime=0)


def deflate_raw(data: bytes) -> bytes:
    packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


@pytest.mark.parametrize(
    ("coding", "encoded"),
    [
        (b"gzip", gz(BODY)),
        (b"X-Gzip", gz(BODY)),
        (b"deflate", zlib.compress(BODY)),
        (b"deflate", deflate_raw(BODY)),  # what some servers send as "deflate"
        (b"gzip", gz(BODY[:10]) + gz(BODY[10:])),  # two members
        (None, BODY),
        (b"identity", BODY),
    ],
)
def test_each_readable_coding_decodes_to_the_body(coding: bytes | None, encoded: bytes) -> None:
    assert decode(encoded, coding, 1000) == BODY


def test_a_bomb_stops_at_the_limit() -> None:
    bomb = gz(b"\0" * (64 << 20))  # 64 MiB of zeros in about 64 KiB
    assert len(bomb) < 100_000
    with pytest.raises(TooLarge):
        decode(bomb, b"gzip", 1 << 20)
    many = gz(b"\0" * 600) * 2  # two members, each within the limit, not both
    with pytest.raises(TooLarge):
        decode(many, b"gzip", 1000)


def test_exactly_the_limit_is_allowed() -> None:
    assert decode(gz(b"a" * 1000), b"gzip", 1000) == b"a" * 1000


@pytest.mark.parametrize(
    ("coding", "encoded"),
    [
        (b"gzip", gz(BODY)[:-5]),  # cut short
        (b"gzip", b"not gzip at all"),
        (b"deflate", b"\x00\x01garbage"),
        (b"gzip", gz(BODY) + b"trailing"),
        (b"br", b"anything"),
        (b"gzip, gzip", gz(gz(BODY))),
    ],
)
def test_a_body_that_cannot_be_read_is_undecodable(coding: bytes, encoded: bytes) -> None:
    with pytest.raises(Undecodable):
        decode(encoded, coding, 1000)


def test_is_encoded() -> None:
    assert is_encoded(b"gzip") and is_encoded(b"br")
    assert not is_encoded(None) and not is_encoded(b"identity") and not is_encoded(b" ")


def test_scrub_replaces_every_occurrence_and_nothing_else() -> None:
    key = b"sk-internal-123"
    assert (
        scrub(b"a sk-internal-123 b sk-internal-123", key) == b"a " + REDACTED + b" b " + REDACTED
    )
    assert scrub(b"sk-internal-12", key) == b"sk-internal-12"
    assert scrub(b"unchanged", None) == b"unchanged"
