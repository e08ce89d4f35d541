"""Path normalisation: every spelling of a refused route is caught or refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.engines.test_endpoints import ALLOWED, INTERNAL, OMITTED

from fairgate.engines import ENGINE_KINDS, adapter_for, normalize_path

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


@pytest.mark.fuzz
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


@pytest.mark.fuzz
@given(st.lists(st.sampled_from(["v1", "slots", ".", "..", "", "%2e", "%2E%2e", "%252e"])))
def test_dot_segments_never_climb_above_the_root(segments: list[str]) -> None:
    result = normalize_path("/" + "/".join(segments))
    assert result is None or result.startswith("/")


# Characters that look like, or lower-case to, ASCII letters of route names.
_LOOKALIKES = {
    "k": ["\u212a"],  # KELVIN SIGN
    "s": ["\u017f", "\uff53"],  # LONG S, FULLWIDTH s
    "i": ["\u0131", "\u0130"],  # dotless i, capital I with dot
    "a": ["\u0430"],  # Cyrillic a
    "o": ["\u043e", "\u2092"],  # Cyrillic o, subscript o
    "-": ["\u2010", "\u00ad"],  # hyphen, soft hyphen
    "_": ["\uff3f"],
    "/": ["\u2215", "\uff0f"],  # DIVISION SLASH, FULLWIDTH SOLIDUS
    ".": ["\u2024", "\uff0e"],
}


def _percent(char: str, depth: int, upper: bool) -> str:
    escaped = "".join(f"%{byte:02X}" if upper else f"%{byte:02x}" for byte in char.encode())
    for _ in range(depth):
        escaped = escaped.replace("%", "%25")
    return escaped


@st.composite
def spellings(draw: st.DrawFn, route: str, *, lookalikes: bool) -> str:
    """``route`` written another way: each character escaped (nested up to 3 levels), its
    case changed or a look-alike put in its place; detours, dot segments, doubled slashes
    and a trailing slash added between segments."""
    out: list[str] = []
    if draw(st.booleans()):  # enter an allowed route first, then climb out of it
        entry = draw(st.sampled_from(ALLOWED["vllm"]))
        out.append(entry + "/.." * entry.count("/"))
    for segment in route.strip("/").split("/"):
        out.append(draw(st.sampled_from(["/", "//", "/./", "/%2e/", "/x/../", "/x/%2E%2e/"])))
        for char in segment:
            choice = draw(st.sampled_from(["keep", "case", "escape", "lookalike"]))
            if choice == "case":
                out.append(char.swapcase())
            elif choice == "escape":
                out.append(_percent(char, draw(st.integers(0, 3)), draw(st.booleans())))
            elif choice == "lookalike" and lookalikes and char.lower() in _LOOKALIKES:
                out.append(draw(st.sampled_from(_LOOKALIKES[char.lower()])))
            else:
                out.append(char)
    out.append(draw(st.sampled_from(["", "/", "//", "/.", "/%2e"])))
    return "".join(out)


@pytest.mark.fuzz
@given(data=st.data(), route=st.sampled_from(INTERNAL + OMITTED))
def test_no_spelling_of_an_internal_route_is_forwarded(data: st.DataObject, route: str) -> None:
    raw = data.draw(spellings(route, lookalikes=True))
    result = normalize_path(raw)
    assert result in (None, route.lower()), raw
    if result is not None:
        assert normalize_path(result) == result
        assert all(adapter_for(kind).endpoint(result) is None for kind in ENGINE_KINDS), raw


@pytest.mark.fuzz
@given(data=st.data(), route=st.sampled_from(ALLOWED["vllm"]))
def test_every_plain_spelling_of_an_allowed_route_is_that_route(
    data: st.DataObject, route: str
) -> None:
    raw = data.draw(spellings(route, lookalikes=False))
    assert normalize_path(raw) == route, raw
