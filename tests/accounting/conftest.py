"""Fixtures of the accounting suite: the store on SQLite and PostgreSQL, a tree with every role."""

from __future__ import annotations

import pytest

from fairgate.store import Store
from fairgate.tenancy import Tenancy
from store.backends import FakeClock, pg_store_url, sqlite_template, store, store_url
from tenancy.world import World, build_world

__all__ = ["pg_store_url", "sqlite_template", "store", "store_url", "world"]


@pytest.fixture
async def world(store: Store) -> World:
    """Two organisations, keys in three teams, a user in every role (tests/tenancy/world.py)."""
    return await build_world(Tenancy(store, clock=FakeClock(), models=None))
