"""Path normalisation: every spelling of a refused route is caught or refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairgate.engines import normalize_path

CANONICAL = [
    ("/v1/chat/completions", "/v1/chat/completions"),
    ("/V1/Chat/Completions", "/v1/chat/completions"),
    ("/v1//chat///completions", "/v1/chat/completions"),
    ("/v1/chat/completions/", "/v1/chat/completions"),
    ("/v1/./chat/completions", "/v1/chat/completions"),
    ("/v1/x/../chat/completions", "/v1/chat/completions"),
    ("/", "/"),
    ("//", "/"),
    (b"/v1/models", "/v1/models"),
    # encodings that resolve to something else: mapped, then judged by the allowlist
    ("/slots", "/slots"),
    ("/SLOTS", "/slots"),
    ("/slots/", "/slots"),
    ("//slots", "/slots"),
    ("/./slots", "/slots"),
    ("/v1/../slots", "/slots"),
    ("/%73lots", "/slots"),
    ("/%2e/slots", "/slots"),
    ("/v1/%2e%2e/slots", "/slots"),
    ("/v1/%2E%2E/slots", "/slots"),
    ("/v1/%252e%252e/slots", "/slots"),
    ("/v1/%25252e%25252e/slots", "/slots"),
    ("/v1/.%2e/metrics", "/metrics"),
    ("/%53%4c%4f%54%53", "/slots"),
    ("/%" + "25" * 5 + "2e/slots", "/slots"),
    ("/v1/chat/completions/%2e%2e/%2e%2e/%2e%2e/props", "/props"),
]

REFUSED = [
    "",
    "slots",
    "*",
    "http://engine/slots",
    "/..",
    "/../slots",
    "/v1/../../slots",
    "/%2e%2e/slots",
    "/v1/%2e%2e/%2e%2e/slots",
    "/v1%2fslots",
    "/v1%2Fslots",
    "/v1/..%2fslots",
    "/v1/%252fslots",
    "/v1/%25252Fslots",
    "/v1\\slots",
    "/v1%5cslots",
    "/v1/%255c../slots",
    "/slots%00",
    "/slots\x00",
    "/sl\x01ots",
    "/slots%0a",
    "/slots%0d%0aX-Injected:%201",
    "/slots%7f",
    "/slots%20",
    "/slots?x=1",
    "/slots%3fx=1",
    "/slots%23frag",
    "/slots%",
    "/slots%zz",
    "/slots%4",
    "/%c0%ae%c0%ae/slots",  # overlong UTF-8 for "."
    "/%c0%afslots",  # overlong UTF-8 for "/"
    "/%e0%80%aeslots",
    "/%ff/slots",
    b"/\xc0\xae\xc0\xae/slots",
    b"/\xff",
    "/%e2%80%8bslots",  # zero-width space
    "/\u212aelvin",  # KELVIN SIGN lower-cases to ASCII "k"
    "/\u017flots",  # LONG S
    "/caf\u00e9",
    "/\ud800",  # lone surrogate
    "/%" + "25" * 9 + "2e/slots",  # nested deeper than the decoder follows
]


@pytest.mark.parametrize(("raw", "expected"), CANONICAL)
def test_spellings_collapse_to_one_canonical_path(raw: str | bytes, expected: str) -> None:
    assert normalize_path(raw) == expected


@pytest.mark.parametrize("raw", REFUSED)
def test_unsafe_paths_are_refused(raw: str | bytes) -> None:
    assert normalize_path(raw) is None


@given(st.text(max_size=40) | st.binary(max_size=40))
def test_result_is_canonical_and_stable(raw: str | bytes) -> None:
    result = normalize_path(raw)
    if result is None:
        return
    assert result.startswith("/")
    assert result == "/" or not result.endswith("/")
    assert "//" not in result
    assert result == result.lower()
    assert result.isascii()
    assert all(segment not in (".", "..") for segment in result.split("/"))
    assert normalize_path(result) == result


@given(st.lists(st.sampled_from(["v1", "slots", ".", "..", "", "%2e", "%2E%2e", "%252e"])))
def test_dot_segments_never_climb_above_the_root(segments: list[str]) -> None:
    result = normalize_path("/" + "/".join(segments))
    assert result is None or result.startswith("/")
