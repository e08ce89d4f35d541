"""``/healthz``, ``/readyz`` and ``/metrics`` on the admin listener (loopback by default).

- ``/healthz``: 200 while the process runs its event loop, with the state of the
  shared dependencies (``details``: e.g. the state back end reachable or not);
  an outage there shows here and in metrics, never as a failed probe.
- ``/readyz``: 200 when the configuration is loaded, the gateway is not draining and
  every model has at least one replica that passes health checks with its breaker
  not open; otherwise 503 with the per-model detail.
- ``/metrics``: Prometheus text format of the gateway's own registry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from fairgate.core.errors import error_body

__all__ = ["build_health_app", "health_routes"]


def health_routes(
    *,
    registry: CollectorRegistry,
    models_ready: Callable[[], Mapping[str, bool]],
    draining: Callable[[], bool],
    details: Callable[[], Mapping[str, object]] | None = None,
) -> list[Route]:
    """The three routes, to mount on the admin app (``build_admin_app``) or on their own."""

    async def healthz(request: Request) -> Response:
        body: dict[str, object] = {"status": "ok"}
        if details is not None:
            body.update(details())
        return Response(orjson.dumps(body), media_type="application/json")

    async def readyz(request: Request) -> Response:
        models = dict(models_ready())
        is_draining = draining()
        ready = not is_draining and bool(models) and all(models.values())
        body = {"ready": ready, "draining": is_draining, "models": models}
        return Response(
            orjson.dumps(body), status_code=200 if ready else 503, media_type="application/json"
        )

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
    ]


def build_health_app(
    *,
    registry: CollectorRegistry,
    models_ready: Callable[[], Mapping[str, bool]],
    draining: Callable[[], bool],
) -> Starlette:
    """The admin listener without the admin API: health, readiness and metrics only."""

    async def not_found(request: Request, exc: Exception) -> Response:
        return Response(
            error_body("unknown route", "not_found_error", "unknown_route"),
            status_code=404,
            media_type="application/json",
        )

    return Starlette(
        routes=health_routes(registry=registry, models_ready=models_ready, draining=draining),
        exception_handlers={404: not_found, 405: not_found},
    )
