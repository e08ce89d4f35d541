"""``multipart/form-data`` bodies: parsed to read or replace a few text fields.

Parsed with python-multipart, the parser Starlette (and so vLLM) uses, so the
gateway reads a form the way the engine will. Parsing is strict where the
engine would be lenient, because a body the gateway cannot read with
certainty must be refused, not guessed at: a form that does not end with its
closing boundary, has more than ``MAX_PARTS`` parts, or a part without a
``name`` is unreadable.

Re-encoding keeps every part's raw headers and bytes and the original
boundary, so the ``Content-Type`` header stays valid.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks

__all__ = ["MAX_PARTS", "Form", "FormPart", "is_form", "parse_form"]

MAX_PARTS = 1000
_SAFE_NAME = re.compile(r"[A-Za-z0-9_.-]+")


@dataclass(frozen=True, slots=True)
class FormPart:
    """One part: its raw header lines, its name, whether it is a file, its bytes."""

    headers: tuple[tuple[bytes, bytes], ...]
    name: str
    is_file: bool
    data: bytes


@dataclass(frozen=True, slots=True)
class Form:
    """A parsed form; ``encode()`` writes it back with the same boundary."""

    boundary: bytes
    parts: tuple[FormPart, ...]

    def fields(self, name: str) -> list[FormPart]:
        return [part for part in self.parts if part.name == name]

    def without(self, names: frozenset[str]) -> Form:
        return Form(self.boundary, tuple(p for p in self.parts if p.name not in names))

    def with_text(self, name: str, value: str) -> Form:
        """This form with every part called ``name`` holding ``value`` (one is added if none).

        Raises ``ValueError`` when ``name`` or ``value`` cannot be written safely.
        """
        data = value.encode("utf-8")
        if self.boundary in data or not _SAFE_NAME.fullmatch(name):
            raise ValueError("a form field that cannot be encoded safely")
        if not self.fields(name):
            header = (b"Content-Disposition", b'form-data; name="' + name.encode() + b'"')
            return Form(self.boundary, (*self.parts, FormPart((header,), name, False, data)))
        parts = tuple(
            FormPart(p.headers, p.name, p.is_file, data) if p.name == name else p
            for p in self.parts
        )
        return Form(self.boundary, parts)

    def encode(self) -> bytes:
        out = bytearray()
        for part in self.parts:
            out += b"--" + self.boundary + b"\r\n"
            for field, value in part.headers:
                out += field + b": " + value + b"\r\n"
            out += b"\r\n" + part.data + b"\r\n"
        out += b"--" + self.boundary + b"--\r\n"
        return bytes(out)


@functools.lru_cache(maxsize=256)  # per header value, as engines.model_field.is_json
def is_form(content_type: str | bytes | None) -> bool:
    media_type, _ = parse_options_header(content_type)
    return media_type == b"multipart/form-data"


class _Collector:
    def __init__(self) -> None:
        self.parts: list[FormPart] = []
        self.ended = False
        self.broken = False
        self._headers: list[tuple[bytes, bytes]] = []
        self._field = bytearray()
        self._value = bytearray()
        self._data = bytearray()

    def callbacks(self) -> MultipartCallbacks:
        return {
            "on_part_begin": self._begin,
            "on_header_field": lambda d, s, e: self._field.extend(d[s:e]),
            "on_header_value": lambda d, s, e: self._value.extend(d[s:e]),
            "on_header_end": self._header_end,
            "on_part_data": lambda d, s, e: self._data.extend(d[s:e]),
            "on_part_end": self._part_end,
            "on_end": self._end,
        }

    def _begin(self) -> None:
        self._headers = []
        self._data = bytearray()

    def _header_end(self) -> None:
        self._headers.append((bytes(self._field), bytes(self._value)))
        self._field = bytearray()
        self._value = bytearray()

    def _part_end(self) -> None:
        disposition = b""
        for field, value in self._headers:
            if field.lower() == b"content-disposition":
                disposition = value
        _, options = parse_options_header(disposition)
        name = options.get(b"name")
        if name is None or len(self.parts) >= MAX_PARTS:
            self.broken = True
            return
        self.parts.append(
            FormPart(
                headers=tuple(self._headers),
                name=name.decode("latin-1"),
                is_file=b"filename" in options,
                data=bytes(self._data),
            )
        )

    def _end(self) -> None:
        self.ended = True


def parse_form(content_type: str | bytes | None, body: bytes) -> Form | None:
    """The form in ``body``, or ``None`` when it is not a complete, well-formed form."""
    media_type, options = parse_options_header(content_type)
    boundary = options.get(b"boundary")
    if media_type != b"multipart/form-data" or not boundary:
        return None
    collector = _Collector()
    try:
        parser = MultipartParser(boundary, collector.callbacks())
        parser.write(body)
        parser.finalize()
    except FormParserError:
        return None
    if collector.broken or not collector.ended:
        return None
    return Form(boundary, tuple(collector.parts))
