"""Sealing: only the token opens a sealed secret, only on its key, and only unchanged."""

from __future__ import annotations

import base64

from fairgate.tenancy.sealing import TOKEN_CHARS, lookup_of, new_token, parse_token, seal, unseal

SECRET = "fg-" + "A" * 43


def test_the_token_opens_what_it_sealed_and_nothing_else_does() -> None:
    token, raw = new_token()
    sealed = seal(raw, SECRET, key_id="01KEY")
    assert unseal(raw, sealed, key_id="01KEY") == SECRET
    _, other = new_token()
    assert unseal(other, sealed, key_id="01KEY") is None
    assert unseal(lookup_of(raw), sealed, key_id="01KEY") is None  # the stored hash opens nothing
    assert unseal(raw, sealed, key_id="01OTHER") is None  # moved onto another key's row
    flipped = sealed[:-1] + bytes([sealed[-1] ^ 1])
    assert unseal(raw, flipped, key_id="01KEY") is None
    assert SECRET.encode() not in sealed and token.encode() not in sealed


def test_two_seals_of_one_secret_differ() -> None:
    _, raw = new_token()
    assert seal(raw, SECRET, key_id="k") != seal(raw, SECRET, key_id="k")


def test_a_token_round_trips_and_only_its_canonical_form_parses() -> None:
    token, raw = new_token()
    assert len(token) == TOKEN_CHARS and parse_token(token) == raw
    bad = [
        "",
        token[:-1],
        token + "A",
        token[:-1] + "=",
        "é" * TOKEN_CHARS,
        "/" * TOKEN_CHARS,
        base64.urlsafe_b64encode(b"\x00" * 31).decode().rstrip("=") + "AAA",
    ]
    # A last character whose low bits are set decodes to the same bytes but is not canonical.
    canonical_last = token[-1]
    for other in "BCDF":
        if other != canonical_last:
            alias = token[:-1] + other
            if base64.urlsafe_b64decode(alias + "=") == raw:
                bad.append(alias)
    for text in bad:
        assert parse_token(text) is None, text


def test_the_lookup_is_neither_the_token_nor_its_plain_sha256() -> None:
    import hashlib

    _, raw = new_token()
    assert lookup_of(raw) != raw
    assert lookup_of(raw) != hashlib.sha256(raw).digest()
    assert lookup_of(raw) == lookup_of(raw)
