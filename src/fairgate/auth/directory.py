"""Where authentication looks a virtual key up: the ``KeyDirectory`` the store implements."""

from __future__ import annotations

from typing import Protocol

from fairgate.core.principal import KeyRecord

__all__ = ["KeyDirectory"]


class KeyDirectory(Protocol):
    """Finds a virtual key by the stored digest of its secret; implemented by the store.

    ``find_key(secret_sha256, now, legacy=None)``:

    - ``secret_sha256`` is the 32-byte digest of the whole secret (``fg-…``) as
      the store keeps it: SHA-256, or HMAC-SHA-256 with the key pepper
      (``fairgate.auth.pepper``). ``legacy``, given with a pepper, is the plain
      SHA-256 a key stored before the pepper still holds; a record matching
      either is returned, in one query.
      It matches a record whose ``secret_sha256`` equals it, or whose
      ``previous_sha256`` equals it (a rotated key: the old secret maps to the
      same record, so limits and reports continue under one ``key_id``).
    - ``now`` is Unix time in seconds. An implementation may use it to skip
      rows it knows to be long dead, never to hide a revoked or expired record.
    - Returns the record also when it is revoked, expired, or found by a
      previous secret whose grace period is over: deciding validity is the
      caller's job, so every refusal can look the same. Returns ``None`` when no
      record has that digest.
    - Raises ``fairgate.core.errors.StoreUnavailable`` when the store cannot
      answer (connection lost, timeout, pool exhausted): never ``None`` for
      that, because ``None`` is cached as "no such key" and answered 401.
    - Fills ``team_models`` with the key's team allowlist, ``org`` with the
      team's organisation and ``cidrs``, ``team_cidrs``, ``org_cidrs`` with the IP
      allowlists of the key, its team and its organisation, so that one lookup
      yields everything authentication needs; the request path reads nothing
      else from the store.


    ``rehash(key_id, old, new)`` replaces the digest ``old`` of ``key_id`` (its
    current or its previous secret's) by ``new``, only where it still is ``old``:
    two gateways re-hashing the same key at once both succeed, one changing the
    row. It changes nothing a cache or the change feed watches.
    """

    async def find_key(
        self, secret_sha256: bytes, now: float, legacy: bytes | None = None
    ) -> KeyRecord | None: ...

    async def rehash(self, key_id: str, old: bytes, new: bytes) -> None: ...
