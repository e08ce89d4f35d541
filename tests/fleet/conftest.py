"""Fixtures of the fleet suite: ``store`` on SQLite and PostgreSQL (see store/backends.py)."""

from store.backends import pg_store_url, sqlite_template, store, store_url

__all__ = ["pg_store_url", "sqlite_template", "store", "store_url"]
