"""What the proxy hands an engine adapter to build the upstream request body."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from fairgate.core.errors import BadRequest
from fairgate.engines.form import Form, is_form, parse_form

__all__ = ["UpstreamRequestBody"]


# built on every request: slotted, not frozen (docs/architecture.md, "Value types")
@dataclass(slots=True)
class UpstreamRequestBody:
    """The client's request body and the gateway's decisions about it.

    ``raw`` is the body exactly as received; ``parsed`` the same body parsed
    once by the proxy with orjson (``None`` for multipart or non-JSON bodies).
    ``upstream_model`` is the engine's id for the model; ``client_model`` the
    name the client used (an alias differs), ``None`` when the body named none.
    ``stream`` is the client's ``stream`` flag; ``include_usage`` asks for the
    final usage chunk of a stream (the proxy sets it only on chat and
    completion routes, where ``stream_options`` exists); ``cache_salt`` is the
    gateway's own prefix-cache salt, ``None`` for no salt. ``content_type`` is
    the client's ``Content-Type`` header, needed to rewrite multipart bodies.
    ``max_tokens`` is the output cap the gateway decided (``engines.output``),
    written into each of ``cap_fields`` by an adapter that re-encodes bodies;
    ``None`` leaves the body's caps alone.
    """

    raw: bytes
    parsed: dict[str, Any] | None
    upstream_model: str
    client_model: str | None = None
    stream: bool = False
    include_usage: bool = False
    cache_salt: str | None = None
    content_type: bytes | None = None
    max_tokens: int | None = None
    cap_fields: tuple[str, ...] = ()

    def json_object(self) -> dict[str, Any]:
        """A fresh copy of the body's top-level JSON object; ``BadRequest`` if it is none."""
        if self.parsed is not None:
            return dict(self.parsed)
        try:
            document = orjson.loads(self.raw)
        except orjson.JSONDecodeError:
            raise BadRequest("the request body is not valid JSON") from None
        if not isinstance(document, dict):
            raise BadRequest("the request body must be a JSON object")
        return document

    def form(self) -> Form | None:
        """The body as a multipart form, ``None`` if it is not one; ``BadRequest`` if malformed."""
        if self.parsed is not None or not is_form(self.content_type):
            return None
        form = parse_form(self.content_type, self.raw)
        if form is None:
            raise BadRequest("the multipart request body is malformed")
        return form
