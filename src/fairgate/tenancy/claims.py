"""One-time claim links: a key handed to a person by a link instead of its secret.

    made = await tenancy.claims.create(actor, team="lab-nlp", expires_in=72 * 3600)
    made.url                       # {public_url}/claim/{token}: send this, never the secret
    await tenancy.claims.peek(token)     # True while it can be redeemed; consumes nothing
    await tenancy.claims.redeem(token)   # the secret, once; None ever after

The key is created through :meth:`Keys.create_in` with the same rules and scope,
in the same transaction as its link, and its secret is sealed under a key only
the token derives (``fairgate.tenancy.sealing``); the token itself is returned
once, inside the URL, and never stored. ``peek`` is for the page a link preview
fetches: it reads and changes nothing. ``redeem`` burns the link in one UPDATE
(``claimed_at`` from NULL, unexpired, its key live), so two people opening the
same link get one secret between them, and wipes the sealed bytes in the same
transaction. Used, expired, never-valid and malformed tokens all answer alike
(False / None). A key revoked, expired or rotated since its link was made is not
handed over (rotation gives it a secret the link never held).

Audit events: ``claim_link.created`` (by the creating actor) and
``claim_link.redeemed`` (actor ``claim-link``, with the caller's address when
given); neither records the token or the secret.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fairgate.auth.pepper import KeyHasher
from fairgate.core.clock import Clock
from fairgate.store import Store, claim_links, from_unix, new_ulid, teams
from fairgate.store.keys import Key
from fairgate.tenancy.actor import Actor
from fairgate.tenancy.base import Service
from fairgate.tenancy.errors import BadRequest
from fairgate.tenancy.keys import Keys
from fairgate.tenancy.sealing import lookup_of, new_token, parse_token, seal, unseal

__all__ = ["DEFAULT_CLAIM_LIFETIME", "MAX_CLAIM_LIFETIME", "ClaimCreated", "Claims"]

DEFAULT_CLAIM_LIFETIME = 72 * 3600.0
"""How long a link stays redeemable unless told otherwise: 72 hours."""

MAX_CLAIM_LIFETIME = 30 * 86400.0
"""Longest lifetime of a link: 30 days (a link is a bearer credential while it is open)."""

_REDEEMER = "claim-link"


@dataclass(frozen=True, slots=True)
class ClaimCreated:
    """A key just created with its link: send ``url`` (it holds ``token``); no secret here."""

    key: Key
    token: str
    url: str
    expires_at: datetime


class Claims(Service):
    """Create keys with claim links, look at a link, redeem it (see the module docstring).

    ``public_url``: the base URL people open (``public_url`` in the configuration);
    without it :meth:`create` is refused (BadRequest ``public_url_unset``), since a link
    nobody can open would leave a key stranded.
    """

    def __init__(
        self,
        store: Store,
        clock: Clock,
        *,
        keys: Keys,
        hasher: KeyHasher | None = None,
        public_url: str | None = None,
    ) -> None:
        super().__init__(store, clock, hasher=hasher)
        self._keys = keys
        self._public_url = None if public_url is None else public_url.rstrip("/")

    async def create(
        self,
        actor: Actor,
        *,
        team: str,
        expires_in: float = DEFAULT_CLAIM_LIFETIME,
        key_expires_in: float | None = None,
        **key_fields: Any,
    ) -> ClaimCreated:
        """A new key of ``team`` (``key_fields`` as for :meth:`Keys.create`; its own lifetime
        is ``key_expires_in``, None: no expiry) and its link, redeemable for ``expires_in``
        seconds (at most 30 days)."""
        if self._public_url is None:
            raise BadRequest(
                "claim links need public_url in the configuration (the address people open "
                "the link at)",
                code="public_url_unset",
            )
        if not 0 < expires_in <= MAX_CLAIM_LIFETIME:
            raise BadRequest(
                "a claim link's lifetime must be in the future, within 30 days",
                code="invalid_claim_expiry",
            )
        token, raw = new_token()
        now = self._now()
        expires_at = from_unix(self._clock.wall() + expires_in)
        async with self._store.write() as conn:
            new = await self._keys.create_in(
                conn, actor, team=team, expires_in=key_expires_in, **key_fields
            )
            link_id = new_ulid(self._clock.wall())
            await claim_links.insert_link(
                conn,
                link_id=link_id,
                key_id=new.key.id,
                lookup=lookup_of(raw),
                sealed=seal(raw, new.secret, key_id=new.key.id),
                created_by=actor.name,
                now=now,
                expires_at=expires_at,
            )
            owner = await teams.by_id(conn, new.key.team_id)
            await self._audit(
                conn,
                actor,
                "claim_link.created",
                now,
                target=f"key:{new.key.id}",
                org_id=owner.org_id if owner else None,
                team_id=new.key.team_id,
                detail={"link": link_id, "expires_at": expires_at.isoformat()},
            )
        return ClaimCreated(new.key, token, f"{self._public_url}/claim/{token}", expires_at)

    async def peek(self, token: str) -> bool:
        """Whether ``token`` is a link that :meth:`redeem` would open now; changes nothing."""
        raw = parse_token(token)
        if raw is None:
            return False
        async with self._store.read() as conn:
            return await claim_links.is_open(conn, lookup_of(raw), self._now())

    async def redeem(self, token: str, *, remote: str | None = None) -> str | None:
        """The key's secret, the first time; None for a used, expired or never-valid link
        (and for a key revoked, expired or rotated since). ``remote``: the caller's address,
        for the audit event."""
        raw = parse_token(token)
        if raw is None:
            return None
        now = self._now()
        async with self._store.write() as conn:
            burnt = await claim_links.burn(conn, lookup_of(raw), now)
            if burnt is None:
                return None
            secret = unseal(raw, burnt.sealed, key_id=burnt.key_id)
            delivered = secret is not None and self._is_current(secret, burnt.secret_sha256)
            await self._audit(
                conn,
                Actor(name=_REDEEMER, remote=remote),
                "claim_link.redeemed",
                now,
                target=f"key:{burnt.key_id}",
                org_id=burnt.org_id,
                team_id=burnt.team_id,
                detail={"link": burnt.id, "delivered": delivered},
            )
        return secret if delivered else None

    def _is_current(self, secret: str, stored: bytes) -> bool:
        """Whether ``secret`` is what the key's row holds now (not rotated since sealing)."""
        legacy = self._hasher.legacy(secret)
        return hmac.compare_digest(self._hasher.digest(secret), stored) or (
            legacy is not None and hmac.compare_digest(legacy, stored)
        )
