"""Virtual keys and admin tokens: shape, randomness, digest, display prefix, shape check."""

from __future__ import annotations

import base64
import hashlib
import string

import pytest

from fairgate.auth.secrets import (
    constant_time_equal,
    looks_like_key,
    new_admin_token,
    new_key,
    sha256,
)

BASE64URL = set(string.ascii_letters + string.digits + "-_")


def _random_part(secret: str, prefix: str) -> bytes:
    encoded = secret.removeprefix(prefix)
    return base64.urlsafe_b64decode(encoded + "=")


def test_a_key_is_fg_and_43_base64url_characters_of_256_random_bits() -> None:
    secret, digest, prefix = new_key()
    assert secret.startswith("fg-")
    assert len(secret) == 46
    assert set(secret[3:]) <= BASE64URL
    raw = _random_part(secret, "fg-")
    assert len(raw) == 32
    # canonical encoding: re-encoding the 32 bytes gives the same text back
    assert base64.urlsafe_b64encode(raw).rstrip(b"=").decode() == secret[3:]
    assert digest == hashlib.sha256(secret.encode()).digest()
    assert prefix == secret[:11]  # fg- and 8 characters, 48 of the 256 bits


def test_an_admin_token_has_the_same_shape_with_fga() -> None:
    secret, digest, prefix = new_admin_token()
    assert secret.startswith("fga-") and len(secret) == 47
    assert len(_random_part(secret, "fga-")) == 32
    assert digest == sha256(secret)
    assert prefix == secret[:12]
    assert looks_like_key(secret, prefix="fga-")
    assert not looks_like_key(secret)


def test_keys_are_unique_and_every_bit_is_uniformly_random() -> None:
    # 2,000 keys: each of the 256 bit positions is set in about half of them.
    # Bounds of ±10 % are 9 standard deviations: a sound generator never fails,
    # while a constant, a counter or a short seed would.
    n = 2000
    secrets = [new_key()[0] for _ in range(n)]
    assert len(set(secrets)) == n
    values = [int.from_bytes(_random_part(s, "fg-"), "big") for s in secrets]
    for bit in range(256):
        ones = sum((v >> bit) & 1 for v in values)
        assert 0.4 * n < ones < 0.6 * n, f"bit {bit} set in {ones} of {n} keys"


def test_the_digest_is_sha256_of_the_whole_secret() -> None:
    assert sha256("fg-abc") == hashlib.sha256(b"fg-abc").digest()
    assert len(sha256("")) == 32
    assert sha256("fg-a") != sha256("fg-b")


def test_constant_time_equal_compares_whole_values() -> None:
    a = sha256("one")
    assert constant_time_equal(a, bytes(a))
    assert not constant_time_equal(a, sha256("two"))
    assert not constant_time_equal(a, a[:31])


def test_generated_keys_look_like_keys() -> None:
    for _ in range(200):
        assert looks_like_key(new_key()[0])


@pytest.mark.parametrize(
    "junk",
    [
        "",
        "fg-",
        "sk-" + "A" * 43,  # another product's prefix
        "FG-" + "A" * 43,
        "fg-" + "A" * 42,  # one short
        "fg-" + "A" * 44,  # one long
        "fg-" + "A" * 42 + "=",  # padding
        "fg-" + "A" * 41 + "+A",  # standard base64, not url-safe
        "fg-" + "A" * 41 + "/A",
        "fg-" + "A" * 41 + " A",
        "fg-" + "A" * 41 + "éA",
        "fg-" + "A" * 42 + "B",  # non-canonical: last character carries stray bits
        "fga-" + "A" * 43,  # an admin token is not a client key
    ],
)
def test_junk_is_refused_by_shape(junk: str) -> None:
    assert not looks_like_key(junk)


def test_the_canonical_last_characters_are_accepted() -> None:
    for last in "AEIMQUYcgkosw048":
        assert looks_like_key("fg-" + "A" * 42 + last)
