"""Reading one HTML form's body: bounded, strict UTF-8, urlencoded only.

    form = await read_form(request, max_bytes=16384)     # raises FormRefused
    form.get("email")                                    # one value, or None

A body over ``max_bytes`` (by ``Content-Length`` or as it arrives) is refused
with 413 before it is read further; a body that is not
``application/x-www-form-urlencoded``, not UTF-8 after percent-decoding, or
carries a field twice or more than ``MAX_FIELDS`` fields is refused with 400.
The reason goes to the server log; the page says only what the person can fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl

from starlette.requests import Request

__all__ = ["MAX_FIELDS", "Form", "FormRefused", "read_form"]

MAX_FIELDS = 16
"""Most fields one form may carry (every form of the pages has fewer than 8)."""

_URLENCODED = "application/x-www-form-urlencoded"


class FormRefused(Exception):
    """A form body the pages do not read: ``status`` (400 or 413), ``reason`` for the log."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Form:
    """The fields of one form, each at most once."""

    fields: dict[str, str]

    def get(self, name: str) -> str | None:
        return self.fields.get(name)


async def read_form(request: Request, *, max_bytes: int) -> Form:
    """The request's form fields (see the module docstring for what is refused)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != _URLENCODED:
        raise FormRefused(400, f"content type {kind!r} is not {_URLENCODED}")
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > max_bytes):
        raise FormRefused(413, f"declared body of {declared!r} bytes over {max_bytes}")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_bytes:
            raise FormRefused(413, f"body over {max_bytes} bytes")
    return _parse(bytes(body))


def _parse(body: bytes) -> Form:
    try:
        text = body.decode("ascii")
        pairs = parse_qsl(
            text,
            keep_blank_values=True,
            strict_parsing=bool(text),
            encoding="utf-8",
            errors="strict",
            max_num_fields=MAX_FIELDS,
        )
    except (UnicodeDecodeError, ValueError) as error:
        raise FormRefused(400, f"form body not readable: {error}") from None
    fields: dict[str, str] = {}
    for name, value in pairs:
        if name in fields:
            raise FormRefused(400, f"field {name!r} given twice")
        if "\x00" in name or "\x00" in value:
            raise FormRefused(400, f"field {name!r} holds a NUL character")
        fields[name] = value
    return Form(fields)
