"""The public names of fairgate.store."""

from __future__ import annotations

import fairgate.store as store


def test_exported_members() -> None:
    assert set(store.__all__) == {
        "PostgresChangeListener",
        "Store",
        "StoreChangeFeed",
        "StoreConflict",
        "StoreKeyDirectory",
        "StoreURL",
        "StoreUnavailable",
        "access_changes",
        "accounts",
        "admin_tokens",
        "allowlists",
        "audit_events",
        "budgets",
        "claim_links",
        "current_revision",
        "fleet",
        "from_unix",
        "head_revision",
        "keys",
        "new_ulid",
        "orgs",
        "people",
        "projects",
        "scim",
        "role_bindings",
        "sso_logins",
        "teams",
        "to_unix",
        "upgrade",
        "usage_records",
        "users",
        "web_sessions",
    }
    for name in store.__all__:
        assert hasattr(store, name)


def test_the_store_directory_satisfies_the_key_directory_protocol() -> None:
    from fairgate.auth import KeyDirectory

    directory: KeyDirectory = store.StoreKeyDirectory.__new__(store.StoreKeyDirectory)
    assert callable(directory.find_key)
