"""The model a body names, fail-closed: unreadable is never "absent"."""

from __future__ import annotations

import orjson
import pytest

from fairgate.engines import MODEL_UNREADABLE, extract_model

JSON = "application/json"


def _form(*parts: bytes, boundary: bytes = b"bnd") -> bytes:
    out = b""
    for part in parts:
        out += b"--" + boundary + b"\r\n" + part + b"\r\n"
    return out + b"--" + boundary + b"--\r\n"


def _field(name: bytes, value: bytes) -> bytes:
    return b'Content-Disposition: form-data; name="' + name + b'"\r\n\r\n' + value


FORM = "multipart/form-data; boundary=bnd"


@pytest.mark.parametrize(
    ("content_type", "body", "expected"),
    [
        (JSON, b'{"model":"llama70b","prompt":"x"}', "llama70b"),
        ("application/json; charset=utf-8", b'{"model":"a"}', "a"),
        ("Application/JSON", b'{"model":"a"}', "a"),
        ("application/vnd.api+json", b'{"model":"a"}', "a"),
        (JSON, b'{"\\u006dodel":"escaped"}', "escaped"),
        (JSON, b'{"model":"first","model":"last"}', "last"),
        (JSON, b'{"prompt":"x"}', None),
        (JSON, b'{"nested":{"model":"x"}}', None),
        (JSON, b'{"model":null}', MODEL_UNREADABLE),
        (JSON, b'{"model":["a","b"]}', MODEL_UNREADABLE),
        (JSON, b'{"model":42}', MODEL_UNREADABLE),
        (JSON, b'["model","a"]', MODEL_UNREADABLE),
        (JSON, b'{"model":"a"', MODEL_UNREADABLE),
        (JSON, b"", MODEL_UNREADABLE),
        (JSON, '{"model":"a"}'.encode("utf-16"), MODEL_UNREADABLE),
        # an engine may parse JSON whatever the content type says: refuse, never "absent"
        ("text/plain", b'{"model":"a"}', MODEL_UNREADABLE),
        ("application/x-www-form-urlencoded", b"model=a", MODEL_UNREADABLE),
        ("application/octet-stream", b'{"model":"a"}', MODEL_UNREADABLE),
        (None, b'{"model":"a"}', MODEL_UNREADABLE),
        ("", b'{"model":"a"}', MODEL_UNREADABLE),
        (FORM, _form(_field(b"model", b"whisper")), "whisper"),
        (FORM, _form(_field(b"file", b"\x00RIFF"), _field(b"model", b"w")), "w"),
        (FORM, _form(_field(b"language", b"en")), None),
        (FORM, _form(_field(b"model", b"a"), _field(b"model", b"b")), MODEL_UNREADABLE),
        (
            FORM,
            _form(b'Content-Disposition: form-data; name="model"; filename="m.txt"\r\n\r\nw'),
            MODEL_UNREADABLE,
        ),
        (FORM, _form(_field(b"model", b"\xff\xfe")), MODEL_UNREADABLE),
        (FORM, _form(_field(b"model", b"w"))[:-10], MODEL_UNREADABLE),  # no closing boundary
        (FORM, b"garbage", MODEL_UNREADABLE),
        ("multipart/form-data", _form(_field(b"model", b"w")), MODEL_UNREADABLE),  # no boundary
        (
            "multipart/form-data; boundary=other",
            _form(_field(b"model", b"w")),
            MODEL_UNREADABLE,
        ),
        (FORM, _form(b"Content-Type: text/plain\r\n\r\nnameless"), MODEL_UNREADABLE),
    ],
)
def test_extract_model(content_type: str | None, body: bytes, expected: object) -> None:
    assert extract_model(content_type, body, None) == expected


def test_the_proxys_parse_is_used_when_given() -> None:
    body = b'{"model":"from-bytes"}'
    assert extract_model(JSON, body, {"model": "from-parse"}) == "from-parse"
    assert extract_model(JSON, body, orjson.loads(body)) == "from-bytes"


def test_bytes_content_type_is_accepted() -> None:
    assert extract_model(b"application/json", b'{"model":"a"}', None) == "a"
    assert extract_model(FORM.encode(), _form(_field(b"model", b"w")), None) == "w"
