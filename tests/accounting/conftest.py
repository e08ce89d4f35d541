"""Fixtures of the accounting suite: the store on SQLite and PostgreSQL, a lock that stalls it."""

from __future__ import annotations

from store.backends import pg_store_url, sqlite_template, store, store_url

__all__ = ["pg_store_url", "sqlite_template", "store", "store_url"]
