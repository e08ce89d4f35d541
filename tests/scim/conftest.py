"""Fixtures of the SCIM suite: the store (SQLite and PostgreSQL) and a Tenancy over it."""

from __future__ import annotations

from store.backends import FakeClock, pg_store_url, sqlite_template, store, store_url
from tenancy.conftest import clock, tenancy

__all__ = [
    "FakeClock",
    "clock",
    "pg_store_url",
    "sqlite_template",
    "store",
    "store_url",
    "tenancy",
]
