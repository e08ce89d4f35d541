"""From a Config to a ready store and tenancy: what ``serve`` and the operator CLI both do.

    async with open_tenancy(config) as tenancy:      # connect, upgrade, sync the orgs
        await tenancy.keys.create(Actor.operator("alice"), team="lab-nlp")

The schema is upgraded automatically whenever the gateway or a command opens
the store (``fairgate db upgrade`` does only that step). A relative SQLite path
is resolved against the configuration file's directory. With ``state.backend:
redis``, a change that withdraws access, once committed, is also announced on
Redis (``redis_notices``), so gateways read the access-change feed at once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

from fairgate.auth.pepper import KeyHasher
from fairgate.config import Config, ConfigError, Diagnostic, Mark
from fairgate.core.clock import Clock
from fairgate.state.notices import RedisNotices
from fairgate.state.target import RedisTarget
from fairgate.store import Store, access_changes, upgrade
from fairgate.tenancy.orgs import declared_teams
from fairgate.tenancy.services import Tenancy

__all__ = [
    "build_store",
    "key_hasher",
    "model_catalogue",
    "model_names",
    "open_tenancy",
    "redis_notices",
    "redis_target",
    "store_url",
]


def store_url(config: Config) -> str:
    """The store URL of ``config`` (``store.url``, or the content of ``store.url_file``)."""
    if config.store.url_file is not None:
        return config.store.url_file.read()
    assert config.store.url is not None
    return config.store.url


def build_store(config: Config, *, timeout: float = 5.0) -> Store:
    """An unconnected Store for ``config``; ValueError for an unusable URL."""
    return Store(store_url(config), base_dir=config.path.resolve().parent, timeout=timeout)


def key_hasher(config: Config) -> KeyHasher:
    """How secrets are stored: HMAC-SHA-256 with ``auth.key_pepper_file``, else SHA-256.

    ``ConfigError`` naming the reference (never the content) when the pepper cannot be
    read or is shorter than 32 bytes.
    """
    ref = config.auth.key_pepper_file
    if ref is None:
        return KeyHasher()
    try:
        return KeyHasher(ref.read().encode())
    except ValueError as exc:
        reason = f"auth.key_pepper_file: {exc}"
        raise ConfigError([Diagnostic.at(Mark(str(ref), 0, 0), reason)]) from None


def redis_target(config: Config) -> RedisTarget:
    """The Redis of ``state.backend: redis``: the URL in ``state.url_file``, or the primary
    that ``state.sentinels`` name (the URL then gives its password and database)."""
    st = config.state
    url = None if st.url_file is None else st.url_file.read().strip()
    password = None
    if st.sentinel_password_file is not None:
        password = st.sentinel_password_file.read().strip()
    sentinels = []
    for address in st.sentinels:
        parts = urlsplit(f"//{address}")
        assert parts.hostname is not None and parts.port is not None  # checked by the schema
        sentinels.append((parts.hostname, parts.port))
    return RedisTarget(url, tuple(sentinels), st.service_name, password)


def redis_notices(config: Config, store: Store) -> RedisNotices | None:
    """With ``state.backend: redis``: the access-change channel, published to after each
    committed change of ``store`` that withdraws access. None otherwise."""
    st = config.state
    if st.backend != "redis":
        return None
    notices = RedisNotices(redis_target(config), prefix=st.prefix, timeout=st.timeout)
    store.on_commit(access_changes.TOPIC, notices.publish)
    return notices


def model_names(config: Config) -> frozenset[str]:
    """Every name a client may use for a model: canonical names and aliases."""
    return frozenset(name for m in config.models for name in (m.name, *m.aliases))


def model_catalogue(config: Config) -> dict[str, str]:
    """Every name a client may use for a model (canonical names and aliases), mapped to
    the model's canonical name."""
    return {name: m.name for m in config.models for name in (m.name, *m.aliases)}


@asynccontextmanager
async def open_tenancy(
    config: Config, *, clock: Clock | None = None, sync: bool = True
) -> AsyncIterator[Tenancy]:
    """Connect, upgrade the schema, sync the declared organisations; close on exit.

    Raises StoreUnavailable when the database does not answer, ConfigConflict when
    the configuration declares a team the store holds under another organisation.
    """
    store = build_store(config)
    notices = redis_notices(config, store)
    await store.connect()
    try:
        await upgrade(store)
        tenancy = Tenancy(
            store,
            clock=clock,
            models=model_catalogue(config),
            declared_teams=declared_teams(config.orgs),
            hasher=key_hasher(config),
            public_url=config.public_url,
        )
        if sync:
            await tenancy.sync_orgs(config.orgs)
        yield tenancy
    finally:
        await store.close()
        if notices is not None:
            await notices.aclose()
