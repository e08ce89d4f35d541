"""People who call with an access token: their synthetic keys, revocation, exchanged keys.

    record = await tenancy.people.person(key_id, issuer, subject, placement, limits)
    await tenancy.people.revoke(actor, issuer="https://sso…", subject="f:1234")
    await tenancy.people.restore(actor, issuer=…, subject=…)
    secret, expires_at, revoked = await tenancy.people.exchange_key(key_id, ttl=3600, keep=100)

``person`` is what authentication calls for a verified token (it implements
``fairgate.auth.jwt.PersonDirectory``): the person's key row is created on first
sight, bound to the team and project the ``map:`` rules gave, and moved when
they give another (an upsert, so replicas meeting a new person at once agree).
Revoking and restoring are the proxy administrators' (Forbidden otherwise),
audited, and reach every replica through the access-change feed at once; a
revoked person is refused whatever token they hold, and so are the keys they
got from ``/v1/auth/exchange``.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from typing import NamedTuple

from fairgate.auth.jwt.mapping import Placement, person_key_id
from fairgate.auth.pepper import KeyHasher
from fairgate.auth.secrets import new_key
from fairgate.core.clock import Clock
from fairgate.core.limits import Limits
from fairgate.core.principal import KeyRecord
from fairgate.store import Store, StoreKeyDirectory, from_unix, people, projects, teams
from fairgate.store.people import Person
from fairgate.tenancy.actor import Actor
from fairgate.tenancy.base import Service
from fairgate.tenancy.errors import BadRequest, Forbidden

__all__ = ["ExchangedKey", "People", "Person"]

log = logging.getLogger("fairgate.tenancy")

_REMEMBERED = 100_000  # people this process knows to be in place; forgotten all at once past it


def _limit_columns(limits: Limits) -> dict[str, int | None]:
    return {
        "rpm": limits.rpm,
        "tpm": limits.tpm,
        "rpd": None,
        "max_in_flight": limits.max_in_flight,
    }


class ExchangedKey(NamedTuple):
    """A new exchanged secret (shown once), its expiry (Unix seconds), and how many of the
    person's oldest unexpired secrets it revoked (past the ``keep`` they may hold)."""

    secret: str
    expires_at: float
    revoked: int


class People(Service):
    """The people known by access tokens (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        *,
        models: Collection[str] | Mapping[str, str] | None = None,
        hasher: KeyHasher | None = None,
    ) -> None:
        super().__init__(store, clock, models=models, hasher=hasher)
        self._directory = StoreKeyDirectory(self._store)
        self._in_place: set[tuple[str, str, str | None]] = set()

    async def person(
        self, key_id: str, issuer: str, subject: str, placement: Placement, limits: Limits
    ) -> KeyRecord | None:
        record = await self._directory.find_person(key_id)
        wanted = (key_id, placement.team, placement.project)
        if (
            record is not None
            and wanted in self._in_place
            and (record.team, record.project) == (placement.team, placement.project)
        ):
            return record
        now = self._now()
        async with self._store.write() as conn:
            team = await teams.by_name(conn, placement.team)
            if team is None:
                log.warning("jwt: the map names team %r, which does not exist", placement.team)
                return None
            project_id = None
            if placement.project is not None:
                project = await projects.by_name(conn, placement.team, placement.project)
                if project is None:
                    log.warning(
                        "jwt: the map names project %r of team %r, which does not exist",
                        placement.project,
                        placement.team,
                    )
                    return None
                project_id = project.id
            created = record is None
            await people.ensure(
                conn, key_id, issuer, subject, team.id, project_id, _limit_columns(limits), now
            )
        if created:
            log.info(
                "jwt: new person %s of %s as key %s in team %s",
                subject[:128],
                issuer,
                key_id,
                team.name,
            )
        if len(self._in_place) >= _REMEMBERED:
            self._in_place.clear()
        self._in_place.add(wanted)
        return await self._directory.find_person(key_id)

    async def list(
        self, actor: Actor, *, revoked_only: bool = False, issuer: str | None = None
    ) -> Sequence[Person]:
        if not actor.root_reader:
            raise Forbidden("only proxy administrators see people", code="forbidden")
        async with self._store.read() as conn:
            return await people.list_people(conn, revoked_only=revoked_only, issuer=issuer)

    async def revoke(self, actor: Actor, *, issuer: str, subject: str) -> str:
        """Refuse the person from now on, on every replica; their key id."""
        key_id = self._key_id(actor, issuer, subject)
        now = self._now()
        async with self._store.write() as conn:
            changed = await people.set_revoked(conn, key_id, issuer, subject, now, by=actor.name)
            if changed:
                await self._audit(
                    conn,
                    actor,
                    "person.revoked",
                    now,
                    target=f"key:{key_id}",
                    detail={"issuer": issuer, "subject": subject[:256]},
                )
        return key_id

    async def restore(self, actor: Actor, *, issuer: str, subject: str) -> str:
        """Lift the person's revocation; their key id."""
        key_id = self._key_id(actor, issuer, subject)
        now = self._now()
        async with self._store.write() as conn:
            if await people.set_restored(conn, key_id, now):
                await self._audit(
                    conn,
                    actor,
                    "person.restored",
                    now,
                    target=f"key:{key_id}",
                    detail={"issuer": issuer, "subject": subject[:256]},
                )
        return key_id

    async def exchange_key(self, key_id: str, *, ttl: float, keep: int) -> ExchangedKey:
        """A new secret for the person's key, valid ``ttl`` seconds. Expired exchanged
        secrets are pruned on the way, and the person's oldest past ``keep`` unexpired
        ones revoked (``people.add_secret``)."""
        secret, _, _ = new_key()
        wall = self._clock.wall()
        now = from_unix(wall)
        async with self._store.write() as conn:
            await people.prune_secrets(conn, now)
            evicted = await people.add_secret(
                conn, key_id, self._hasher.digest(secret), from_unix(wall + ttl), now, keep=keep
            )
        if evicted:
            log.warning(
                "jwt: key %s holds its %d exchanged keys at most; the oldest %d revoked",
                key_id,
                keep,
                evicted,
            )
        return ExchangedKey(secret, wall + ttl, evicted)

    @staticmethod
    def _key_id(actor: Actor, issuer: str, subject: str) -> str:
        if not actor.root_admin:
            raise Forbidden("only proxy administrators revoke people", code="forbidden")
        if not issuer or not subject or len(issuer) > 1000 or len(subject) > 1024:
            raise BadRequest("give the issuer and the subject", code="invalid_person")
        try:
            issuer.encode("utf-8")
            subject.encode("utf-8")
        except UnicodeEncodeError:
            raise BadRequest("the issuer and subject must be text", code="invalid_person") from None
        if "\x00" in issuer or "\x00" in subject:
            raise BadRequest("the issuer and subject must be text", code="invalid_person")
        return person_key_id(issuer, subject)
