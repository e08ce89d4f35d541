"""The durable store: SQLAlchemy Core tables, repositories and Alembic migrations.

    store = Store(url, base_dir=config_dir)   # sqlite:///PATH (WAL) or postgresql://…
    await store.connect()
    await upgrade(store)                      # migrations shipped in the package
    directory = StoreKeyDirectory(store)      # fairgate.auth.KeyDirectory
    feed = StoreChangeFeed(store)             # fairgate.auth.ChangeFeed (access_changes)
    async with store.write() as conn:
        await keys.revoke(conn, key_id, now, where=scope_clause)

One repository module per table (``orgs``, ``teams``, ``projects``, ``users``,
``keys``, ``role_bindings``, ``admin_tokens``, ``audit_events``, ``usage_records``,
``budgets``, ``access_changes``, ``allowlists``, ``claim_links``, ``accounts``,
``web_sessions``, ``sso_logins``, ``scim``, ``fleet``): functions that run inside
the caller's transaction and take the ``where`` clause the tenancy layer builds
from who is acting, so a write outside the actor's scope matches no row. Nothing
on the request path reads the store except a key cache miss
(``StoreKeyDirectory.find_key``) and the change watcher's feed reads; usage
records are written from the accounting queue, off the request path.

Errors (``fairgate.store.errors``)::

    StoreUnavailable   the database did not answer (from fairgate.core.errors)
    StoreConflict      a uniqueness or reference rule refused a write
"""

from fairgate.store import (
    access_changes,
    accounts,
    admin_tokens,
    allowlists,
    audit_events,
    budgets,
    claim_links,
    fleet,
    keys,
    orgs,
    people,
    projects,
    role_bindings,
    scim,
    sso_logins,
    teams,
    usage_records,
    users,
    web_sessions,
)
from fairgate.store.change_feed import PostgresChangeListener, StoreChangeFeed
from fairgate.store.database import Store
from fairgate.store.errors import StoreConflict, StoreUnavailable
from fairgate.store.ids import new_ulid
from fairgate.store.key_directory import StoreKeyDirectory
from fairgate.store.migrate import current_revision, head_revision, upgrade
from fairgate.store.timestamp import from_unix, to_unix
from fairgate.store.url import StoreURL

__all__ = [
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
    "role_bindings",
    "scim",
    "sso_logins",
    "teams",
    "to_unix",
    "upgrade",
    "usage_records",
    "users",
    "web_sessions",
]
