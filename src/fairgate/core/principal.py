"""Who a request is for: resolved once by authentication, read by every later stage.

A principal is built from the store when a key is looked up and then cached;
nothing on the request path reads the store. Its fields are decided by the
gateway (the key's record, its team and organisation), never by the client.
"""

from __future__ import annotations

from dataclasses import dataclass

from fairgate.core.address_lists import AddressRule
from fairgate.core.limits import NO_LIMITS, Limits

__all__ = ["KeyRecord", "Principal"]


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """A virtual key as stored: never the secret, only its SHA-256.

    ``secret_sha256`` is the digest of the full secret (``fg-…``); ``previous_sha256``
    the digest of the secret replaced by a rotation, valid until ``previous_until``
    (Unix seconds). ``models`` is the key's own allowlist and ``team_models`` its
    team's (``None`` = no list; an empty tuple = nothing); names as configured,
    canonical or alias. ``limits`` are the key's effective limits (its own bounded by
    its team's per-key limits); ``team_limits`` its team's totals across all the
    team's keys together (the store's ``total_*`` columns).
    ``cidrs``, ``team_cidrs`` and ``org_cidrs`` are the IP allowlists of the key, its
    team and its organisation (``None`` = no list), networks in their normal form.
    """

    key_id: str
    prefix: str
    secret_sha256: bytes
    org: str
    team: str
    project: str | None = None
    tags: tuple[str, ...] = ()
    models: tuple[str, ...] | None = None
    team_models: tuple[str, ...] | None = None
    expires_at: float | None = None
    revoked_at: float | None = None
    previous_sha256: bytes | None = None
    previous_until: float | None = None
    limits: Limits = NO_LIMITS
    team_limits: Limits = NO_LIMITS
    cidrs: tuple[str, ...] | None = None
    team_cidrs: tuple[str, ...] | None = None
    org_cidrs: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Principal:
    """The identity every stage after authentication uses.

    ``models`` holds the canonical model names the principal may use (team list ∩
    key list, aliases resolved), or ``None`` when neither list restricts it.
    ``limits`` are the key's limits as the store gave them (a field ``None`` = not
    set), so the limit stage needs no lookup and builds nothing; ``team_limits`` are
    the team's totals shared by all its keys. ``addresses`` is
    every IP allowlist that applies to the key, ready to match (``None``: none applies).
    """

    key_id: str
    org: str
    team: str
    project: str | None = None
    tags: tuple[str, ...] = ()
    models: frozenset[str] | None = None
    expires_at: float | None = None
    limits: Limits = NO_LIMITS
    team_limits: Limits = NO_LIMITS
    addresses: AddressRule | None = None
