"""Properties of the vLLM body rewrite: no steering field of the client survives any spelling.

The bodies are written as raw JSON text, so a field can be spelled with
``\\uXXXX`` escapes in any of its characters, repeated with other values, and
nested in ``extra_body`` (which SDKs flatten, and which must not reach the
engine either). Every value the client gives a steering field carries the
marker ``SMUGGLED``: no byte of it may reach the engine.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from starlette.datastructures import Headers
from starlette.formparsers import MultiPartParser

from fairgate.engines import STRIPPED_FIELDS, UpstreamRequestBody, adapter_for
from fairgate.engines.form import parse_form

pytestmark = pytest.mark.fuzz

VLLM = adapter_for("vllm")
MARKER = b"SMUGGLED"
UPSTREAM_MODEL = "meta/llama-70b"
CAP_FIELDS = ("max_tokens", "max_completion_tokens")
# What the rewrite sets itself; every other field of the client must arrive unchanged.
SET_BY_GATEWAY = {"model", "stream_options", *CAP_FIELDS}

_WHITESPACE = st.sampled_from(["", " ", "\n", "\t", "\r\n", "  "])
_PLAIN_TEXT = st.text(
    st.characters(codec="utf-8", exclude_characters="S"),  # no "S": no accidental marker
    max_size=8,
)
_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | _PLAIN_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_PLAIN_TEXT, inner, max_size=3),
    max_leaves=8,
)
_SMUGGLED_VALUES = st.sampled_from(
    [
        '"SMUGGLED"',
        "-100",  # written as a marker below (numbers cannot carry one)
        '{"SMUGGLED":true}',
        '["SMUGGLED"]',
        '{"do_remote_prefill":true,"remote_engine_id":"SMUGGLED"}',
    ]
)


@st.composite
def spelled(draw: st.DrawFn, name: str) -> str:
    """``name`` as JSON source text, any of its characters written as an escape."""
    out = ['"']
    for char in name:
        style = draw(st.sampled_from(["plain", "lower", "upper"]))
        if style == "plain":
            out.append(char)
        else:
            code = f"{ord(char):04x}"
            out.append("\\u" + (code.upper() if style == "upper" else code))
    out.append('"')
    return "".join(out)


def _marker_value(source: str) -> str:
    # A number cannot carry the marker; a one-key object around it can.
    return '{"SMUGGLED":-100}' if source == "-100" else source


@st.composite
def smuggled_member(draw: st.DrawFn, depth: int = 0) -> str:
    """One ``"steering field": value`` member, possibly an ``extra_body`` nesting more."""
    name = draw(st.sampled_from(sorted(STRIPPED_FIELDS)))
    key = draw(spelled(name))
    if name == "extra_body" and depth < 2:
        inner = draw(st.lists(smuggled_member(depth + 1), min_size=1, max_size=3))
        return f"{key}:{{{','.join(inner)}}}"
    return f"{key}:{_marker_value(draw(_SMUGGLED_VALUES))}"


@st.composite
def hostile_bodies(draw: st.DrawFn) -> bytes:
    """A JSON object with ordinary fields and steering fields, duplicated and escaped."""
    ordinary = draw(
        st.dictionaries(
            st.sampled_from(["messages", "prompt", "temperature", "stream", "n", "seed", "x"]),
            _JSON_VALUES,
            max_size=5,
        )
    )
    members = [
        f"{orjson.dumps(k).decode()}:{orjson.dumps(v).decode()}" for k, v in ordinary.items()
    ]
    members += draw(st.lists(smuggled_member(), min_size=1, max_size=6))
    order = draw(st.permutations(range(len(members))))
    spaced = [draw(_WHITESPACE) + members[i] + draw(_WHITESPACE) for i in order]
    return ("{" + ",".join(spaced) + "}").encode()


def _pairs_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    assert len(keys) == len(set(keys)), f"duplicate keys sent to the engine: {keys}"
    return dict(pairs)


def _rewrite(raw: bytes, *, parsed_by_proxy: bool, salt: str | None, stream: bool) -> bytes:
    body = UpstreamRequestBody(
        raw=raw,
        parsed=orjson.loads(raw) if parsed_by_proxy else None,
        upstream_model=UPSTREAM_MODEL,
        stream=stream,
        include_usage=stream,
        cache_salt=salt,
        max_tokens=64,
        cap_fields=CAP_FIELDS,
    )
    return VLLM.prepare_body(body)


@given(
    raw=hostile_bodies(),
    parsed_by_proxy=st.booleans(),
    salt=st.none() | st.just("tenant-salt"),
    stream=st.booleans(),
)
@example(
    raw=b'{"\\u0070riority":"SMUGGLED","priority":{"SMUGGLED":-100},"prompt":"x"}',
    parsed_by_proxy=True,
    salt=None,
    stream=False,
)
@example(
    raw=b'{"extra_body":{"priority":"SMUGGLED","extra_body":{"cache_salt":"SMUGGLED"}}}',
    parsed_by_proxy=False,
    salt="tenant-salt",
    stream=True,
)
def test_no_steering_field_reaches_the_engine_in_any_spelling(
    raw: bytes, parsed_by_proxy: bool, salt: str | None, stream: bool
) -> None:
    sent_bytes = _rewrite(raw, parsed_by_proxy=parsed_by_proxy, salt=salt, stream=stream)
    assert MARKER not in sent_bytes
    # The engine parses with Python's json (FastAPI): read it so, duplicates included.
    sent = json.loads(sent_bytes, object_pairs_hook=_pairs_without_duplicates)
    for field in STRIPPED_FIELDS - {"cache_salt"}:
        assert field not in sent
    assert sent.get("cache_salt") == salt
    assert sent["model"] == UPSTREAM_MODEL
    assert all(sent[field] == 64 for field in CAP_FIELDS)
    client = orjson.loads(raw)
    kept = {k: v for k, v in client.items() if k not in STRIPPED_FIELDS | SET_BY_GATEWAY}
    assert {k: v for k, v in sent.items() if k in kept} == kept
    assert set(sent) - SET_BY_GATEWAY - {"cache_salt"} == set(kept)


_DISPOSITIONS = st.sampled_from(
    [
        b'Content-Disposition: form-data; name="{}"',
        b"content-disposition: form-data; name={}",
        b'CONTENT-DISPOSITION: form-data; name="{}"; filename="a.txt"',
        b'Content-Disposition:   form-data;name="{}"',
        b'Content-Disposition: form-data; other="x"; name="{}"',
        b'Content-Disposition: form-data; name="x"; name="{}"',  # the last one counts
        b"Content-Disposition: form-data; name*=UTF-8''x; name=\"{}\"",
        b'Content-Disposition: form-data; name="{}"\r\nContent-Type: text/plain',
        b'Content-Disposition: form-data; name="x"\r\nContent-Disposition: form-data; name="{}"',
    ]
)


@st.composite
def hostile_forms(draw: st.DrawFn) -> bytes:
    """A multipart body whose parts include steering fields with headers in any spelling."""
    parts: list[bytes] = []
    names = draw(
        st.lists(
            st.sampled_from([*sorted(STRIPPED_FIELDS), "model", "file", "language"]),
            min_size=1,
            max_size=8,
        )
    )
    for name in names:
        disposition = draw(_DISPOSITIONS).replace(b"{}", name.encode())
        value = MARKER if name in STRIPPED_FIELDS else b"kept"
        parts.append(b"--BOUNDARY\r\n" + disposition + b"\r\n\r\n" + value + b"\r\n")
    return b"".join(parts) + b"--BOUNDARY--\r\n"


@given(raw=hostile_forms())
def test_no_steering_field_reaches_the_engine_in_a_form(raw: bytes) -> None:
    content_type = b"multipart/form-data; boundary=BOUNDARY"
    body = UpstreamRequestBody(
        raw=raw, parsed=None, upstream_model=UPSTREAM_MODEL, content_type=content_type
    )
    sent = VLLM.prepare_body(body)
    assert MARKER not in sent
    form = parse_form(content_type, sent)
    assert form is not None
    assert not {part.name for part in form.parts} & STRIPPED_FIELDS
    # And as vLLM reads it: with Starlette's own multipart parser.
    names, models = asyncio.run(_starlette_form(content_type, sent))
    assert not names & STRIPPED_FIELDS
    assert models and set(models) == {UPSTREAM_MODEL}  # every part called model rewritten


async def _starlette_form(content_type: bytes, body: bytes) -> tuple[set[str], list[str]]:
    """The field names Starlette reads in ``body``, and the values of ``model`` (a part
    with a file name is a file to Starlette: its bytes, then)."""

    async def chunks() -> AsyncIterator[bytes]:
        yield body

    headers = Headers({"content-type": content_type.decode()})
    form = await MultiPartParser(headers, chunks()).parse()
    try:
        models = [
            value if isinstance(value, str) else (await value.read()).decode()
            for value in form.getlist("model")
        ]
        return set(form), models
    finally:
        await form.close()
