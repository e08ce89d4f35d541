"""The admin listener's application: the admin API (FastAPI) with /healthz, /readyz, /metrics.

    app = build_admin_app(
        tenancy=tenancy,                         # fairgate.tenancy.Tenancy over the store
        master_key_sha256=sha256(master_key),    # or None: admin tokens only
        guard=guard,                             # fairgate.auth.AuthGuard, the admin listener's own
        registry=metrics.registry, models_ready=registry.ready, draining=lambda: gw.draining,
    )

OpenAPI is served at ``/admin/openapi.json`` to admin callers only (it maps the
whole API for whoever reads it); no interactive docs page (it would load scripts
from elsewhere on a listener that holds the master key). With ``door``
(``fairgate.admin.network``) every request first passes the network rules. Bodies are
limited to 64 KiB, parameters and body strings hold no control character
(``fairgate.admin.params``), and every error is the OpenAI envelope (``fairgate.admin.errors``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from fastapi import Depends, FastAPI
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry
from starlette.types import ASGIApp

from fairgate.accounts import Sessions
from fairgate.admin.authn import AdminAuthenticator
from fairgate.admin.body_limit import BodyLimit
from fairgate.admin.dashboard import Board
from fairgate.admin.dashboard.access import Access
from fairgate.admin.dashboard.endpoints import dashboard_router
from fairgate.admin.dashboard.pages import Pages
from fairgate.admin.dashboard.signin import signin_router
from fairgate.admin.endpoints.allowlists import allowlists_router
from fairgate.admin.endpoints.audit import audit_router
from fairgate.admin.endpoints.budgets import budgets_router
from fairgate.admin.endpoints.context import Caller
from fairgate.admin.endpoints.identities import identities_router
from fairgate.admin.endpoints.keys import keys_router
from fairgate.admin.endpoints.people import people_router
from fairgate.admin.endpoints.spend import spend_router
from fairgate.admin.endpoints.tree import tree_router
from fairgate.admin.errors import install_error_handlers
from fairgate.admin.fairshare import FairShareMonitor, fairshare_router
from fairgate.admin.fleet import fleet_router
from fairgate.admin.health import health_routes
from fairgate.admin.network import AdminDoor
from fairgate.admin.openapi import ERROR_RESPONSES, install_openapi
from fairgate.admin.params import plain_text
from fairgate.admin.scim_prefix import ScimPrefix
from fairgate.admin.sso.actors import SsoActors
from fairgate.admin.sso.client import SsoClient
from fairgate.admin.sso.endpoints import sso_router
from fairgate.auth import AuthGuard, sha256
from fairgate.config.secrets import SecretCell
from fairgate.core.cidr import NetworkSet
from fairgate.core.client_addr import ClientAddresses
from fairgate.core.route_classes import RouteRules
from fairgate.fleet.controller import FleetController
from fairgate.tenancy import Tenancy

__all__ = ["build_admin_app"]


def build_admin_app(
    *,
    tenancy: Tenancy,
    master_key_sha256: bytes | None,
    guard: AuthGuard,
    registry: CollectorRegistry,
    models_ready: Callable[[], Mapping[str, bool]],
    draining: Callable[[], bool],
    fairshare: FairShareMonitor | None = None,
    health_details: Callable[[], Mapping[str, object]] | None = None,
    master_key_changes: SecretCell | None = None,
    clients: ClientAddresses | None = None,
    rules: RouteRules | None = None,
    metrics_token_sha256: bytes | None = None,
    metrics_token_changes: SecretCell | None = None,
    dashboard: Board | None = None,
    sessions: Sessions | None = None,
    sso: SsoClient | None = None,
    scim: ASGIApp | None = None,
    fleet: FleetController | None = None,
) -> ASGIApp:
    """The whole admin listener as one ASGI application (``GET /admin/fairshare`` only
    with a ``fairshare`` monitor: without fair share configured the route is absent;
    ``GET /admin/dashboard`` only with a ``dashboard``, and its sign-in form only
    with web ``sessions`` as well; ``/admin/login``, ``/admin/callback``, ``/admin/session``
    and ``/admin/logout`` only with ``sso`` and ``sessions``; ``/scim/v2`` only with a
    ``scim`` application, ``fairgate.scim``'s, which app.py builds: the admin API never
    imports it); ``/admin/placement``, ``/admin/nodes`` and ``/admin/replicas`` only with
    the ``fleet``'s control plane. With ``sessions`` an admin session's cookie is a
    credential of the admin API too (``fairgate.admin.endpoints.context``).

    ``master_key_changes``, the cell of a master key held in a vault, makes the
    master key accepted follow each new value read there (``metrics_token_changes``
    the same for the metrics token). With ``clients`` (the
    trusted proxies), ``rules`` (the route classes' networks) or a metrics token
    the application sits behind an :class:`AdminDoor`; without them, every caller
    is its connection and every class answers everyone (embedding, tests).
    """
    app = FastAPI(
        title="fairgate admin API",
        version="1",
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
        dependencies=[Depends(plain_text)],
        responses=ERROR_RESPONSES,
        # no redirect from /admin/keys/ to /admin/keys: it would be built from the Host
        # header and the listener's scheme (http behind a TLS proxy); a 404 envelope instead
        redirect_slashes=False,
    )
    install_error_handlers(app)
    install_openapi(app)
    authenticator = AdminAuthenticator(tenancy, master_key_sha256=master_key_sha256, guard=guard)
    if master_key_changes is not None:
        master_key_changes.on_change(lambda key: authenticator.set_master_key_sha256(sha256(key)))
    app.state.authenticator = authenticator
    app.include_router(tree_router(tenancy))
    app.include_router(keys_router(tenancy))
    app.include_router(people_router(tenancy))
    app.include_router(identities_router(tenancy))
    app.include_router(audit_router(tenancy))
    app.include_router(spend_router(tenancy.store))
    app.include_router(budgets_router(tenancy))
    app.include_router(allowlists_router(tenancy))
    if fairshare is not None:
        app.include_router(fairshare_router(fairshare, tenancy))
    if fleet is not None:
        app.include_router(fleet_router(fleet))
    actors = SsoActors(tenancy.store) if sso is not None else None
    pages, access = Pages(), Access(authenticator, tenancy, sessions, actors)
    if sessions is not None:
        app.state.access = access
        if sso is not None and actors is not None:
            app.include_router(sso_router(sso, actors, access, pages))
    if dashboard is not None:
        app.include_router(dashboard_router(dashboard, pages, tenancy, access))
        if sessions is not None:
            end_session = sso.end_session_url if sso is not None else None
            app.include_router(signin_router(pages, access, end_session))
    for route in health_routes(
        registry=registry, models_ready=models_ready, draining=draining, details=health_details
    ):
        app.router.routes.append(route)

    @app.get("/admin/openapi.json", include_in_schema=False)
    async def openapi(caller: Caller) -> JSONResponse:
        return JSONResponse(app.openapi())

    limited = BodyLimit(app if scim is None else ScimPrefix(app, scim))
    if clients is None and rules is None and metrics_token_sha256 is None:
        return limited
    door = AdminDoor(
        limited,
        clients=clients or ClientAddresses(NetworkSet(())),
        rules=rules or RouteRules({}),
        guard=guard,
        metrics_token_sha256=metrics_token_sha256,
        audit=tenancy.audit,
    )
    if metrics_token_changes is not None:
        metrics_token_changes.on_change(lambda token: door.set_metrics_token_sha256(sha256(token)))
    return door
