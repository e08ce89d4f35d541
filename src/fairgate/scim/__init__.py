"""SCIM 2.0 provisioning (RFC 7643/7644) at ``/scim/v2`` on the admin listener.

    scim = build_scim(config.scim, store=store, tenancy=tenancy, guard=admin_guard,
                      clock=clock, metrics=ScimMetrics(registry))
    await scim.storage.reconcile()          # at start-up
    admin_app = build_admin_app(..., scim=scim.asgi)

The protocol is scim2-server's (filters, PATCH, sorting, paging, ETags, the
discovery endpoints, errors); the gateway keeps the resources in its store
(``fairgate.scim.storage``) and derives users, sessions and role bindings from
them after every write and at start-up (``fairgate.scim.reconcile``, nested
groups expanded by ``fairgate.scim.membership``). The endpoints and their
token: ``fairgate.scim.app``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from starlette.types import ASGIApp

from fairgate.auth import AuthGuard
from fairgate.config.diagnostics import ConfigError, Diagnostic, Mark
from fairgate.config.scim import MIN_SCIM_TOKEN_BYTES, Scim
from fairgate.core.clock import Clock
from fairgate.observability.scim_metrics import ScimMetrics
from fairgate.scim.app import ScimApp
from fairgate.scim.provider import scim_provider
from fairgate.scim.reconcile import Reconciler
from fairgate.scim.storage import StoreScimStorage
from fairgate.store import Store
from fairgate.tenancy.audit import Audit

__all__ = ["ScimApp", "ScimParts", "StoreScimStorage", "build_scim", "scim_token"]


@dataclass(frozen=True, slots=True)
class ScimParts:
    """The SCIM endpoints and their storage (whose ``reconcile`` runs at start-up)."""

    app: ScimApp
    storage: StoreScimStorage

    @property
    def asgi(self) -> ASGIApp:
        """The application typed as Starlette's ASGI callable (scim2-server types its own)."""
        return cast(ASGIApp, self.app)


def scim_token(config: Scim) -> str:
    """The provider's token; ConfigError naming the reference (never the content) when it
    cannot be read or is shorter than 32 bytes."""
    token = config.token_file.read()
    if len(token.encode()) < MIN_SCIM_TOKEN_BYTES:
        reason = (
            f"scim.token_file: the token must be at least {MIN_SCIM_TOKEN_BYTES} bytes "
            f"(it has {len(token.encode())})"
        )
        raise ConfigError([Diagnostic.at(Mark(str(config.token_file), 0, 0), reason)])
    return token


def build_scim(
    config: Scim,
    *,
    store: Store,
    audit: Audit,
    guard: AuthGuard,
    clock: Clock,
    metrics: ScimMetrics,
) -> ScimParts:
    provider = scim_provider(config.max_results)
    storage = StoreScimStorage(store, provider, Reconciler(config, metrics), clock)
    app = ScimApp(
        storage, provider, token=scim_token(config), guard=guard, audit=audit, metrics=metrics
    )
    ref = config.token_file
    if ref.vault is not None:
        ref.cell.on_change(app.set_token)
    return ScimParts(app, storage)
