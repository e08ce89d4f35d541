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
from fairgate.store.audit_events import AuditEvent
from fairgate.tenancy.actor import Actor
from fairgate.tenancy.errors import BadRequest
from fairgate.tenancy.service import Service

__all__ = ["Audit"]

log = logging.getLogger("fairgate.audit")


class Audit(Service):
    """Audit events, newest first, filtered to the actor's scope.

    A proxy admin or viewer reads every event; an org admin or viewer the events
    placed in their organisation; a team admin or team viewer those of their team.
    """

    async def list(
        self,
        actor: Actor,
        *,
        since: float | None = None,
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
                action=action,
                before_id=before_id,
                limit=limit,
            )

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
