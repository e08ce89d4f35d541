"""Secrets held in OpenBao or HashiCorp Vault (KV version 2), read by reference.

    client.py     VaultClient: the async HTTP client (token, AppRole, renewal, KV v2 reads)
    refresher.py  SecretRefresher: every reference read at start-up, then every cache_ttl

Errors::

    VaultError           one call gave no usable answer (status, reason; never a secret)
    SecretsUnreadable    start-up could not read some references (each named, with its reason)
"""

from __future__ import annotations

from fairgate.config import Config
from fairgate.vault.client import MAX_ANSWER_BYTES, VaultClient, VaultError
from fairgate.vault.refresher import (
    SecretObserver,
    SecretRefresher,
    SecretsUnreadable,
    vault_references,
)

__all__ = [
    "MAX_ANSWER_BYTES",
    "SecretObserver",
    "SecretRefresher",
    "SecretsUnreadable",
    "VaultClient",
    "VaultError",
    "read_vault_secrets",
    "refresher_for",
    "vault_references",
]


def refresher_for(config: Config, observer: SecretObserver | None = None) -> SecretRefresher | None:
    """The refresher of ``config``'s vault references; None when it has none.

    Create it in a running event loop (its client opens a session there).
    """
    refs = vault_references(config)
    if config.vault is None or not refs:
        return None
    return SecretRefresher(
        refs, VaultClient(config.vault), interval=config.vault.cache_ttl, observer=observer
    )


async def read_vault_secrets(config: Config) -> int:
    """Read every vault reference of ``config`` into its cell; the number of distinct ones.

    Raises :class:`SecretsUnreadable` naming each reference that could not be read.
    """
    refresher = refresher_for(config)
    if refresher is None:
        return 0
    try:
        await refresher.read_all()
    finally:
        await refresher.close()
    return len({ref.vault for ref in vault_references(config)})
