"""The real admin app over a real store (SQLite and PostgreSQL), called through ASGI."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from prometheus_client import CollectorRegistry

from fairgate.admin import build_admin_app
from fairgate.auth import AuthGuard, FailureLimiter, LookupCeiling
from fairgate.auth.secrets import sha256
from fairgate.core.clock import Clock
from fairgate.store import Store
from fairgate.tenancy import Tenancy
from store.backends import FakeClock, pg_store_url, sqlite_template, store, store_url
from tenancy.world import World, build_world

__all__ = ["admin_guard", "api", "pg_store_url", "sqlite_template", "store", "store_url"]

MASTER_KEY = "master-key-for-tests-only-0123456789abcdef"
MODELS = {"llama-70b": "llama-70b", "llama70b": "llama-70b", "llama-8b": "llama-8b"}
PUBLIC_URL = "https://llm.example.org"


@dataclass
class Api:
    client: httpx.AsyncClient
    world: World
    tenancy: Tenancy
    guard: AuthGuard
    clock: FakeClock
    models_ready: dict[str, bool]

    def as_user(self, user: str) -> dict[str, str]:
        return {"authorization": f"Bearer {self.world.tokens[user]}"}

    @property
    def master(self) -> dict[str, str]:
        return {"authorization": f"Bearer {MASTER_KEY}"}


def admin_guard(
    clock: Clock, failures_per_minute: int = 5, lookups_per_minute: int = 0
) -> AuthGuard:
    """An admin listener's guard as the gateway builds it (no lookup ceiling by default)."""
    return AuthGuard(
        FailureLimiter(failures_per_minute, clock), LookupCeiling(lookups_per_minute, clock)
    )


def make_client(app: object, addr: str = "10.1.2.3") -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(addr, 40000))  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=transport, base_url="http://admin.test", timeout=30)


@pytest.fixture
async def api(store: Store) -> AsyncIterator[Api]:
    clock = FakeClock()
    tenancy = Tenancy(store, clock=clock, models=MODELS, public_url=PUBLIC_URL)
    world = await build_world(tenancy)
    guard = admin_guard(clock)
    ready = {"llama-70b": True}
    app = build_admin_app(
        tenancy=tenancy,
        master_key_sha256=sha256(MASTER_KEY),
        guard=guard,
        registry=CollectorRegistry(),
        models_ready=lambda: ready,
        draining=lambda: False,
    )
    async with make_client(app) as client:
        yield Api(client, world, tenancy, guard, clock, ready)
