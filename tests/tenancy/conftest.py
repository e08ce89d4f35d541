"""Fixtures of the tenancy suite: a Tenancy over ``store`` (SQLite and PostgreSQL), a test clock."""

from __future__ import annotations

import pytest

from fairgate.store import Store
from fairgate.tenancy import Tenancy
from store.backends import FakeClock, pg_store_url, sqlite_template, store, store_url

__all__ = ["clock", "pg_store_url", "sqlite_template", "store", "store_url", "tenancy"]

MODELS = {"llama-70b": "llama-70b", "llama70b": "llama-70b", "llama-8b": "llama-8b",
          "qwen-32b": "qwen-32b"}  # fmt: skip
"""Every name the gateway serves, mapped to its model's canonical name (an alias: llama70b)."""


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def tenancy(store: Store, clock: FakeClock) -> Tenancy:
    return Tenancy(store, clock=clock, models=MODELS)
