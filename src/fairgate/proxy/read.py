"""The read stage: what the request asks for, read once.

Three calls, in the order the other stages need them (``proxy/pipeline.py``):

- ``head``: one pass over the request's headers, before anything else: content type,
  accept, the session, whether a body is announced, and the credential count onto the
  exchange; the Authorization, Content-Length and tags values back (the rest of the
  client's headers is never forwarded).
- ``endpoint``: the endpoint the path calls (after the identify stage: an unknown
  path answers 401 to a caller without a key, not 404).
- ``body``: after the limit stage's head check (a key it would refuse costs no body's
  memory): the body (bounded, parsed once, capped), the model it names with its
  output reservation and request policies, the tenant's cache salt and the tags.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from fairgate.core.asgi import Receive, Scope
from fairgate.core.errors import BadRequest
from fairgate.core.principal import Principal
from fairgate.engines import FieldRefused, is_json
from fairgate.proxy.endpoints import Endpoint, EndpointTable, ModelEntry
from fairgate.proxy.exchange import Exchange
from fairgate.proxy.request import Caps, check_caps, parse_json, read_body
from fairgate.proxy.reservation import OutputPolicy
from fairgate.proxy.responses import ResponseScope
from fairgate.proxy.tags import TagPolicy

__all__ = ["Read"]

log = logging.getLogger("fairgate.proxy")


class Read:
    """The read stage over the model table (``endpoints``), the body's caps, the output
    policy (reservations), the tag policy, the cache salter and, with the Responses
    API, the response-id scope."""

    __slots__ = (
        "_caps",
        "_endpoints",
        "_output",
        "_responses",
        "_salt",
        "_session_header",
        "_tags",
        "_tags_header",
    )

    def __init__(
        self,
        endpoints: EndpointTable,
        caps: Caps,
        output: OutputPolicy,
        *,
        tags: TagPolicy | None = None,
        salt: Callable[[Principal], str | None] = lambda _p: None,
        session_header: bytes = b"x-session-id",
        responses: ResponseScope | None = None,
    ) -> None:
        self._endpoints = endpoints
        self._caps = caps
        self._output = output
        self._tags = tags or TagPolicy()
        self._tags_header = self._tags.header.encode("latin-1")
        self._salt = salt
        self._session_header = session_header
        self._responses = responses

    def head(self, scope: Scope, ex: Exchange) -> tuple[bytes | None, bytes | None, bytes | None]:
        """One pass over the request's headers onto ``ex``; returns the Authorization,
        Content-Length and tags values."""
        authorization = length = tags = None
        session, tags_name = self._session_header, self._tags_header
        for name, value in scope["headers"]:
            if name == b"authorization":
                # the first, as the admin API and the metrics door read it; a second
                # one is a second credential, refused by the identify stage
                ex.credentials += 1
                if authorization is None:
                    authorization = value
            elif name == b"content-type":
                ex.content_type = value
            elif name == b"content-length":
                length = value
                ex.body_unread = value.strip() != b"0"
            elif name == b"transfer-encoding":
                ex.body_unread = True
            elif name == b"accept":
                ex.accept = value
            elif name == b"accept-encoding":
                ex.accept_encoding = value
            elif name == session:
                ex.session = value
            elif name == tags_name:
                tags = value
            elif name == b"x-api-key" or name == b"api-key":
                ex.credentials += 1
        return authorization, length, tags

    def endpoint(self, scope: Scope, ex: Exchange) -> Endpoint:
        """The endpoint the request's path calls (404 for none), named on ``ex``."""
        endpoint = self._endpoints.resolve_path(scope.get("raw_path") or scope["path"].encode())
        ex.endpoint = endpoint.name
        return endpoint

    async def body(
        self, receive: Receive, ex: Exchange, length: bytes | None, tags: bytes | None
    ) -> ModelEntry:
        """The body, the model it names with its reservation and request policies, the
        tenant's cache salt and the request's tags onto ``ex``; returns the model's entry
        (its chain)."""
        await self._read_body(receive, ex, length)
        entry = self._output.reserve(ex, self._endpoints.model_for(ex))
        _check_fields(ex, entry)
        principal = ex.principal
        assert principal is not None
        ex.cache_salt = self._salt(principal)
        if self._responses is not None:
            await self._responses.check(ex)  # a state read only with previous_response_id
        added = self._tags.apply(principal, tags)
        if added is not None:
            ex.tags = added
        return entry

    async def _read_body(self, receive: Receive, ex: Exchange, length: bytes | None) -> None:
        declared = None
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                raise BadRequest("invalid Content-Length header") from None
        ex.body = await read_body(receive, declared, self._caps)
        ex.body_unread = False
        ex.prompt_bytes = len(ex.body)
        # Any spelling the model check reads as JSON (``Application/JSON``,
        # ``application/…+json``) is parsed here, so the caps cannot be sidestepped.
        if ex.content_type is None or is_json(ex.content_type):
            ex.parsed = parsed = parse_json(ex.body)
            check_caps(parsed, self._caps)
            ex.stream = "stream" in parsed and parsed["stream"] is True
            if "stream_options" in parsed:
                options = parsed["stream_options"]
                ex.client_wants_usage = (
                    isinstance(options, dict) and options.get("include_usage") is True
                )


def _check_fields(ex: Exchange, entry: ModelEntry) -> None:
    """The chain's request policies (``engines.policy``); a refusal is logged with its field."""
    try:
        entry.check_fields(ex)
    except FieldRefused as refused:
        log.info(
            "request %s refused: %s (%s, model %s)",
            ex.request_id,
            refused.code,
            refused.message,
            ex.requested_model,
        )
        raise
