"""The model a request body names, read fail-closed.

    extract_model("application/json", b'{"model": "llama70b"}', None)  == "llama70b"
    extract_model("application/json", b'{"prompt": "hi"}', None)       is None
    extract_model("text/plain", b'{"model": "llama70b"}', None)        is MODEL_UNREADABLE

Three outcomes, and the proxy treats them differently on a route that carries
a model:

- a string: the model to check against the caller's allowlist and route;
- ``None`` (absent): the body names no model; the proxy answers 400
  "model is required", because a gateway in front of several models cannot
  pick one on the caller's behalf and an engine would fall back to its default;
- ``MODEL_UNREADABLE``: the body may name a model the gateway cannot see with
  certainty (another content type, malformed JSON or form, a non-string
  ``model``, a ``model`` form field given twice or as a file); the proxy
  answers 400 and never forwards it. An engine such as llama-server parses
  JSON whatever the ``Content-Type`` says, so "could not read it" can never
  mean "let it through".
"""

from __future__ import annotations

import enum
import functools
from typing import Any

import orjson
from python_multipart.multipart import parse_options_header

from fairgate.engines.form import is_form, parse_form

__all__ = ["MODEL_UNREADABLE", "ModelUnreadable", "extract_model", "is_json"]


class ModelUnreadable(enum.Enum):
    """The body may name a model, but not in a way the gateway can read with certainty."""

    UNREADABLE = "unreadable"


MODEL_UNREADABLE = ModelUnreadable.UNREADABLE


# Remembered per header value: a client sends the same few, and the reading is asked for
# twice a request (the body's parse, the model's); bounded, so no client can grow it.
@functools.lru_cache(maxsize=256)
def is_json(content_type: str | bytes | None) -> bool:
    """``application/json`` or any ``application/…+json`` media type, parameters ignored."""
    media_type, _ = parse_options_header(content_type)
    return media_type == b"application/json" or (
        media_type.startswith(b"application/") and media_type.endswith(b"+json")
    )


def _from_json(body: bytes, parsed: dict[str, Any] | None) -> str | ModelUnreadable | None:
    document: object = parsed
    if document is None:
        try:
            document = orjson.loads(body)
        except orjson.JSONDecodeError:
            return MODEL_UNREADABLE
    if not isinstance(document, dict):
        return MODEL_UNREADABLE
    if "model" not in document:
        return None
    model = document["model"]
    return model if isinstance(model, str) else MODEL_UNREADABLE


def _from_form(content_type: str | bytes, body: bytes) -> str | ModelUnreadable | None:
    form = parse_form(content_type, body)
    if form is None:
        return MODEL_UNREADABLE
    fields = form.fields("model")
    if not fields:
        return None
    if len(fields) > 1 or fields[0].is_file:
        return MODEL_UNREADABLE
    try:
        return fields[0].data.decode("utf-8")
    except UnicodeDecodeError:
        return MODEL_UNREADABLE


def extract_model(
    content_type: str | bytes | None, body: bytes, parsed: dict[str, Any] | None
) -> str | ModelUnreadable | None:
    """The model named by a request body; see the module text for the three outcomes.

    ``parsed`` is the body already parsed by the proxy (orjson), or ``None``;
    when ``None`` and the content type is JSON, the body is parsed here.
    """
    if is_json(content_type):
        return _from_json(body, parsed)
    if content_type is not None and is_form(content_type):
        return _from_form(content_type, body)
    return MODEL_UNREADABLE
