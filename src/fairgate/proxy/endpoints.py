"""Which endpoint a request calls and which models can serve it.

The path is normalised first (``engines.normalize_path``) and must be on the
allowlist of at least one configured engine kind, else 404 — engine-internal
paths are never reachable, whatever their spelling. The model named in the
body (JSON or multipart) then selects a ``ModelEntry``: the model and its
fallbacks, each a ``Candidate`` that knows its engine adapter. A model the
body does not name, or names unreadably, is refused (fail-closed).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import orjson

from fairgate.auth import allows
from fairgate.core.asgi import Scope, Send
from fairgate.core.errors import BadRequest, NotFound
from fairgate.core.memo import BoundedMemo
from fairgate.core.principal import Principal
from fairgate.engines import (
    EndpointKind,
    EngineAdapter,
    ModelUnreadable,
    RequestPolicy,
    UpstreamRequestBody,
    extract_model,
    normalize_path,
    parse_form,
    policy_for,
)
from fairgate.proxy.exchange import Exchange

if TYPE_CHECKING:
    from fairgate.config import Model
    from fairgate.upstream.replica import Replica

__all__ = ["Candidate", "EndpointTable", "LocalHandler", "ModelEntry", "send_json"]

LocalHandler = Callable[[Scope, Exchange, Send], Awaitable[None]]
_MODEL_PREFIX = b"/v1/models/"
_MODEL_ENDPOINT = "/v1/models/{model}"
_MAX_PATHS = 1024  # resolved paths remembered at most (all forgotten past that)
_PATH_BYTES = 512  # a longer path is resolved each time, never held


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str  # the normalised path
    local: LocalHandler | None = None


@dataclass(slots=True)
class Candidate:
    """One model able to serve a request: its name, the engine's name for it, its adapter,
    and the request policy its bodies must meet (``engines.policy``)."""

    name: str
    upstream_model: str
    adapter: EngineAdapter
    policy: RequestPolicy = field(default_factory=RequestPolicy)
    _kinds: dict[str, EndpointKind | None] = field(default_factory=dict)

    def endpoint_kind(self, endpoint: str) -> EndpointKind | None:
        try:
            return self._kinds[endpoint]
        except KeyError:
            kind = self._kinds[endpoint] = self.adapter.endpoint(endpoint)
            return kind

    def upstream_target(self, endpoint: str) -> bytes:
        """The request target for ``endpoint`` (an endpoint this candidate serves)."""
        kind = self.endpoint_kind(endpoint)
        assert kind is not None
        return kind.path.encode("ascii")

    def usage_per_sequence(self, endpoint: str) -> bool:
        """Whether each usage the engine reports on ``endpoint`` counts one sequence only."""
        kind = self.endpoint_kind(endpoint)
        return kind is not None and kind.usage_per_sequence

    def upstream_path(self, endpoint: str) -> str | None:
        kind = self.endpoint_kind(endpoint)
        return kind.path if kind is not None else None

    def body_for(self, ex: Exchange) -> bytes:
        cached = ex.upstream_bodies.get(self.name)
        if cached is None:
            kind = self.endpoint_kind(ex.endpoint)
            assert kind is not None
            cached = ex.upstream_bodies[self.name] = self.adapter.prepare_body(
                UpstreamRequestBody(
                    raw=ex.body,
                    parsed=ex.parsed,
                    upstream_model=self.upstream_model,
                    client_model=ex.client_model or None,
                    stream=ex.stream,
                    include_usage=ex.stream and self._usage_in_stream(ex.endpoint),
                    cache_salt=ex.cache_salt,
                    content_type=ex.content_type,
                    max_tokens=ex.output_caps.get(self.name),
                    cap_fields=kind.output.fields,
                )
            )
        return cached

    def _usage_in_stream(self, endpoint: str) -> bool:
        kind = self.endpoint_kind(endpoint)
        return kind is not None and kind.usage in ("chat", "completion")

    def headers_for(self, ex: Exchange, replica: Replica) -> list[tuple[bytes, bytes]]:
        return self.adapter.headers(
            internal_key=replica.internal_key,
            content_type=ex.content_type,
            accept=ex.accept,
            request_id=ex.request_id,
            priority=ex.priority,
            host=replica.host_header,
            # a stream is read event by event: it is asked for uncompressed
            accept_encoding=None if ex.stream else ex.accept_encoding,
        )


@dataclass(frozen=True, slots=True)
class ModelEntry:
    chain: Sequence[Candidate]  # the model itself first, then its fallbacks in order
    # every top-level key a policy of the chain reads, gathered once (not per request)
    _fields: frozenset[str] = field(init=False, repr=False, compare=False)
    # endpoint → this entry's candidates that serve it (None: none does), found once each
    _serving: dict[str, ModelEntry | None] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        fields = frozenset().union(*(c.policy.fields for c in self.chain))
        object.__setattr__(self, "_fields", fields)

    def serving(self, endpoint: str) -> ModelEntry | None:
        """The entry of this chain's models whose engine serves ``endpoint`` (this entry
        when all do), in chain order; None when none does."""
        try:
            return self._serving[endpoint]
        except KeyError:
            chain = tuple(c for c in self.chain if c.upstream_path(endpoint) is not None)
            entry = self if len(chain) == len(self.chain) else ModelEntry(chain) if chain else None
            self._serving[endpoint] = entry
            return entry

    def check_fields(self, ex: Exchange) -> None:
        """Refuse a body that any model of the chain would refuse (``FieldRefused``, 400):
        whichever of them serves, the engine gets no field its policy denies."""
        if ex.parsed is not None:
            if self._fields.isdisjoint(ex.parsed):
                return  # no key any policy of the chain reads: every one would pass it
            for candidate in self.chain:
                candidate.policy.check(ex.parsed)
            return
        form = parse_form(ex.content_type, ex.body) if ex.content_type else None
        if form is None:
            # model_for read the body as JSON or as a form, or refused it
            raise BadRequest("the request body could not be read", code="invalid_body")
        for candidate in self.chain:
            candidate.policy.check_form(form)


def _policy(model: Model) -> RequestPolicy:
    """The model's engine-kind defaults with its ``request_policy`` applied."""
    change = model.request_policy
    return policy_for(model.engine).merged(
        deny=change.deny, allow=change.allow, caps=change.caps, max_bytes=change.max_bytes
    )


class EndpointTable:
    """Paths and model names resolved against the configuration, built once at start-up."""

    def __init__(
        self,
        models: Sequence[Model],
        adapters: dict[str, EngineAdapter],
        local: dict[str, LocalHandler] | None = None,
    ) -> None:
        self._local = dict(local or {})  # gateway pages by exact path (GET /me)
        candidates = {
            m.name: Candidate(m.name, m.upstream_model, adapters[m.engine], _policy(m))
            for m in models
        }
        self._entries: dict[str, ModelEntry] = {}
        for m in models:
            chain = [candidates[m.name], *(candidates[f] for f in m.fallbacks)]
            entry = ModelEntry(tuple(chain))
            self._entries[m.name] = entry
            for alias in m.aliases:
                self._entries[alias] = entry
        self._canonical = {alias: m.name for m in models for alias in (m.name, *m.aliases)}
        self._adapters = tuple({id(a): a for a in adapters.values()}.values())
        created = int(time.time())
        self._listings: dict[frozenset[str] | None, bytes] = {}
        self._created = created
        # clients call the same few paths: each resolved once (a long one each time)
        self._paths = BoundedMemo[bytes, Endpoint](
            _MAX_PATHS, keeps=lambda path: len(path) <= _PATH_BYTES
        )

    def resolve_path(self, raw_path: bytes) -> Endpoint:
        """The endpoint ``raw_path`` calls, or 404; remembered per path (bounded, refusals
        not kept): clients call the same few paths, and normalising one takes a dozen steps."""
        endpoint = self._paths.get(raw_path)
        if endpoint is None:
            endpoint = self._paths.keep(raw_path, self._resolve(raw_path))
        return endpoint

    def _resolve(self, raw_path: bytes) -> Endpoint:
        tail = raw_path[len(_MODEL_PREFIX) :]
        if raw_path.startswith(_MODEL_PREFIX) and tail and b"/" not in tail:
            # One model id; ``org/name`` arrives as ``org%2Fname`` (the SDK encodes
            # it). Answered from configuration and never forwarded, so the path
            # policy's refusal of encoded slashes does not apply here.
            return Endpoint(_MODEL_ENDPOINT, self._get_model)
        path = normalize_path(raw_path)
        if path is None:
            raise NotFound("unknown route", code="unknown_route")
        if path == "/v1/models":
            return Endpoint(path, self._list_models)
        handler = self._local.get(path)
        if handler is not None:
            return Endpoint(path, handler)
        if path.startswith("/v1/models/"):
            # The endpoint's name is a metric label: never the client's model id.
            return Endpoint(_MODEL_ENDPOINT, self._get_model)
        if not any(adapter.endpoint(path) is not None for adapter in self._adapters):
            raise NotFound("unknown route", code="unknown_route")
        return Endpoint(path)

    def model_for(self, ex: Exchange) -> ModelEntry:
        """The entry for the model the body names; fills the exchange's model fields."""
        name = extract_model(ex.content_type, ex.body, ex.parsed)
        if isinstance(name, ModelUnreadable):
            raise BadRequest("the request's model could not be read", code="model_unreadable")
        if name is None:
            raise BadRequest("'model' is required", code="model_required")
        entry = self._entries.get(name)
        principal = ex.principal
        if entry is None or (principal is not None and not allows(principal, entry.chain[0].name)):
            # A model the key may not use answers exactly like one that does not exist.
            raise NotFound(f"The model '{_printable(name)}' does not exist", code="model_not_found")
        serving = entry.serving(ex.endpoint)
        if serving is not None and principal is not None and principal.models is not None:
            chain = tuple(c for c in serving.chain if allows(principal, c.name))
            if len(chain) != len(serving.chain):
                serving = ModelEntry(chain) if chain else None
        if serving is None:
            raise NotFound("unknown route for this model", code="unknown_route")
        ex.client_model = name
        ex.requested_model = ex.model = entry.chain[0].name
        return serving

    async def _list_models(self, scope: Scope, ex: Exchange, send: Send) -> None:
        await send_json(send, 200, self._listing(ex.principal), ex)

    def _listing(self, principal: Principal | None) -> bytes:
        """The model list a principal may see (aliases included), rendered once per allowlist."""
        allowed = principal.models if principal is not None else None
        body = self._listings.get(allowed)
        if body is None:
            if len(self._listings) > 1024:  # bounded: allowlists are few, but never trust that
                self._listings.clear()
            body = self._listings[allowed] = orjson.dumps(
                {
                    "object": "list",
                    "data": [
                        {
                            "id": name,
                            "object": "model",
                            "created": self._created,
                            "owned_by": "fairgate",
                            "root": root,
                        }
                        for name, root in self._canonical.items()
                        if allowed is None or root in allowed
                    ],
                }
            )
        return body

    async def _get_model(self, scope: Scope, ex: Exchange, send: Send) -> None:
        name = scope["path"][len("/v1/models/") :]
        canonical = self._canonical.get(name)
        principal = ex.principal
        if canonical is None or (principal is not None and not allows(principal, canonical)):
            raise NotFound(f"The model '{_printable(name)}' does not exist", code="model_not_found")
        body = orjson.dumps(
            {
                "id": name,
                "object": "model",
                "created": self._created,
                "owned_by": "fairgate",
                "root": canonical,
            }
        )
        await send_json(send, 200, body, ex)


def _printable(name: str) -> str:
    return name[:200].encode("ascii", "backslashreplace").decode()


async def send_json(send: Send, status: int, body: bytes, ex: Exchange) -> None:
    ex.status = status
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"x-request-id", ex.request_id.encode()),
            ],
        }
    )
    ex.first_byte_at = time.monotonic()
    await send({"type": "http.response.body", "body": body})
