"""The audit trail: read it within one's scope, and record failed admin authentications.

Every state change writes its event in the same transaction as the change, so a
change without its event (or the reverse) cannot be committed. A failed admin
authentication is written on its own, and a store that cannot take it does not
change the answer (401): the failure is logged instead.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from fairgate.store import StoreUnavailable, audit_events, from_unix
from fairgate.store.audit_chain import Break, ChainCheck, ChainHead
from fairgate.store.audit_events import AuditEvent
from fairgate.tenancy.actor import Actor
from fairgate.tenancy.base import Service
from fairgate.tenancy.errors import BadRequest, Forbidden

__all__ = ["Audit"]

log = logging.getLogger("fairgate.audit")


class Audit(Service):
    """Audit events, newest first, filtered to the actor's scope.

    A proxy admin or viewer reads every event; an org admin or viewer the events
    placed in their organisation; a team admin or team viewer those of their team.
    Events form one hash chain (``fairgate.store.audit_chain``), which ``verify``
    recomputes.
    """

    async def list(
        self,
        actor: Actor,
        *,
        since: float | None = None,
        actor_name: str | None = None,
        action: str | None = None,
        before_id: int | None = None,
        limit: int = 100,
    ) -> Sequence[AuditEvent]:
        if not 1 <= limit <= 1000:
            raise BadRequest("limit must be between 1 and 1000", code="invalid_limit")
        async with self._store.read() as conn:
            return await audit_events.list_events(
                conn,
                self._scope(actor).audit_read(),
                since=None if since is None else from_unix(since),
                actor=actor_name,
                action=action,
                before_id=before_id,
                limit=limit,
            )

    async def verify(self, actor: Actor) -> Break | ChainHead:
        """Recompute the whole chain: its first broken link, or the head it reached.

        Only a proxy admin or viewer may: the chain runs through every organisation's events.
        """
        if not actor.root_reader:
            raise Forbidden("verifying the audit chain needs a proxy role", code="forbidden")
        check = ChainCheck()
        async with self._store.read() as conn:
            async for row in audit_events.chain_rows(conn):
                broken = check.feed(row)
                if broken is not None:
                    log.error("audit chain broken at event %d: %s", broken.event_id, broken.message)
                    return broken
        return check.head

    async def failed_authentication(self, *, remote: str | None, reason: str) -> None:
        """Record a refused admin credential; never raises for a store that cannot answer."""
        try:
            async with self._store.write() as conn:
                await audit_events.insert_event(
                    conn,
                    at=self._now(),
                    actor="anonymous",
                    action="auth.failed",
                    remote=remote,
                    detail={"reason": reason},
                )
        except StoreUnavailable as exc:
            log.warning("audit: failed admin authentication from %s not recorded: %s", remote, exc)
