"""Multipart forms: parsed like the engine parses them, written back losslessly."""

from __future__ import annotations

from fairgate.engines.form import MAX_PARTS, is_form, parse_form

CT = b"multipart/form-data; boundary=----WebKitFormBoundary7MA4YWxkTrZu0gW"
B = b"----WebKitFormBoundary7MA4YWxkTrZu0gW"


def _body(*parts: bytes) -> bytes:
    return b"".join(b"--" + B + b"\r\n" + p + b"\r\n" for p in parts) + b"--" + B + b"--\r\n"


FILE = (
    b'Content-Disposition: form-data; name="file"; filename="speech.mp3"\r\n'
    b"Content-Type: audio/mpeg\r\n\r\n" + bytes(range(256)) + b"\r\n\r\n--\r"
)
MODEL = b'Content-Disposition: form-data; name="model"\r\n\r\nwhisper-1'


def test_a_form_round_trips_byte_for_byte() -> None:
    raw = _body(FILE, MODEL)
    form = parse_form(CT, raw)
    assert form is not None
    assert [(p.name, p.is_file) for p in form.parts] == [("file", True), ("model", False)]
    assert form.parts[0].data == bytes(range(256)) + b"\r\n\r\n--\r"
    assert form.encode() == raw


def test_replacing_and_dropping_fields() -> None:
    form = parse_form(CT, _body(FILE, MODEL, b'Content-Disposition: form-data; name="x"\r\n\r\n1'))
    assert form is not None
    changed = form.without(frozenset({"x"})).with_text("model", "big-model")
    assert changed.encode() == _body(FILE, MODEL.replace(b"whisper-1", b"big-model"))


def test_with_text_adds_a_missing_field_the_engine_can_read() -> None:
    form = parse_form(CT, _body(FILE))
    assert form is not None
    again = parse_form(CT, form.with_text("model", "m").encode())
    assert again is not None
    assert [p.data for p in again.fields("model")] == [b"m"]


def test_too_many_parts_is_unreadable() -> None:
    field = b'Content-Disposition: form-data; name="a"\r\n\r\n1'
    assert parse_form(CT, _body(*[field] * MAX_PARTS)) is not None
    assert parse_form(CT, _body(*[field] * (MAX_PARTS + 1))) is None


def test_is_form() -> None:
    assert is_form(CT)
    assert is_form("Multipart/Form-Data; boundary=x")
    assert not is_form("application/json")
    assert not is_form(None)
