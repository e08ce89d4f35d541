"""The engine adapter contract, and the route-table base every adapter shares."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from fairgate.engines.body import UpstreamRequestBody
from fairgate.engines.endpoints import EndpointKind
from fairgate.engines.headers import upstream_headers
from fairgate.engines.metrics import MetricNames

__all__ = ["EndpointTableAdapter", "EngineAdapter"]


class EngineAdapter(Protocol):
    """What the proxy and the replica layer need to know about one engine kind.

    Pure: no I/O, no clock, safe to share between requests and tasks.

    - ``route(path)`` takes a path already reduced by ``normalize_path`` and
      returns the allowed route, or ``None`` (answer 404). Fail-closed allowlist.
    - ``prepare_body(req)`` returns the exact bytes to send upstream. Raises
      ``BadRequest`` when the body must be rewritten but cannot be read.
    - ``headers(...)`` returns the complete upstream header list (built from
      scratch, see ``engines.headers``); only vLLM sends ``priority``.
    - ``rewrites_body`` is true when ``prepare_body`` re-encodes every body.
    - ``metric_names`` names the load metrics in the engine's ``/metrics``.
    - ``health_path`` is the path the health checker GETs (2xx = healthy).
    """

    @property
    def kind(self) -> str: ...

    @property
    def rewrites_body(self) -> bool: ...

    @property
    def sends_priority(self) -> bool: ...

    @property
    def metric_names(self) -> MetricNames: ...

    @property
    def health_path(self) -> str: ...

    def endpoint(self, path: str) -> EndpointKind | None: ...

    def prepare_body(self, req: UpstreamRequestBody) -> bytes: ...

    def headers(
        self,
        *,
        internal_key: str | None,
        content_type: bytes | None,
        accept: bytes | None,
        request_id: str,
        priority: int | None,
        host: bytes,
        accept_encoding: bytes | None = None,
    ) -> list[tuple[bytes, bytes]]: ...

    def with_metric_names(self, names: MetricNames) -> EngineAdapter: ...


@dataclass(frozen=True, slots=True)
class EndpointTableAdapter:
    """Endpoint lookup, headers without priority, metric-name override; subclasses write bodies."""

    kind: str
    endpoints: Mapping[str, EndpointKind]
    metric_names: MetricNames
    health_path: str

    @property
    def rewrites_body(self) -> bool:
        return False

    @property
    def sends_priority(self) -> bool:
        """Whether the engine has a priority scheduler that reads ``x-vllm-priority``."""
        return False

    def endpoint(self, path: str) -> EndpointKind | None:
        return self.endpoints.get(path)

    def headers(
        self,
        *,
        internal_key: str | None,
        content_type: bytes | None,
        accept: bytes | None,
        request_id: str,
        priority: int | None,
        host: bytes,
        accept_encoding: bytes | None = None,
    ) -> list[tuple[bytes, bytes]]:
        # Engines without a priority scheduler never see a priority header.
        return upstream_headers(
            internal_key=internal_key,
            content_type=content_type,
            accept=accept,
            request_id=request_id,
            priority=priority if self.sends_priority else None,
            host=host,
            accept_encoding=accept_encoding,
        )

    def with_metric_names(self, names: MetricNames) -> EngineAdapter:
        adapter: EngineAdapter = dataclasses.replace(self, metric_names=names)
        return adapter

    def prepare_body(self, req: UpstreamRequestBody) -> bytes:
        """The body sent upstream; each engine kind defines it (vLLM, pass-through)."""
        raise NotImplementedError
