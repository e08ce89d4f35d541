"""What every tenancy service shares: the store, the clock, the known models, the audit write."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from fairgate.auth.pepper import KeyHasher
from fairgate.core.clock import Clock
from fairgate.store import Store, audit_events, from_unix
from fairgate.tenancy.actor import Actor
from fairgate.tenancy.errors import BadRequest
from fairgate.tenancy.names import check_labels
from fairgate.tenancy.scope import Scope

__all__ = ["Service"]


class Service:
    """Base of the tenancy services: each write runs in one transaction with its audit event.

    ``models`` is every model name the gateway serves (canonical and aliases),
    used to refuse an allowlist naming an unknown model; None accepts any name.
    Given as a mapping (name → canonical name, ``model_catalogue``), it also says
    which model an alias stands for; a plain collection names canonical models.
    """

    def __init__(
        self,
        store: Store,
        clock: Clock,
        *,
        models: Collection[str] | Mapping[str, str] | None = None,
        hasher: KeyHasher | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._hasher = hasher or KeyHasher()
        self._models = None if models is None else frozenset(models)
        self._canonical: Mapping[str, str] | None = (
            None
            if models is None
            else dict(models)
            if isinstance(models, Mapping)
            else {m: m for m in models}
        )

    def _now(self) -> datetime:
        return from_unix(self._clock.wall())

    def _check_models(self, models: Collection[str] | None) -> tuple[str, ...] | None:
        """An allowlist as given (None: every model), refused if it names an unknown model."""
        if models is None:
            return None
        names = check_labels("model", models)
        if self._models is not None:
            unknown = [m for m in names if m not in self._models]
            if unknown:
                raise BadRequest(f"unknown model {unknown[0]!r}", code="model_not_found")
        return names

    def _canonical_model(self, model: str) -> str:
        """The canonical name of ``model`` (itself for a canonical name, the model an alias
        stands for); BadRequest for a name the gateway does not serve."""
        (name,) = check_labels("model", [model])
        if self._canonical is None:
            return name
        canonical = self._canonical.get(name)
        if canonical is None:
            raise BadRequest(
                f"unknown model {name[:256]!r}: give a model's name or one of its aliases",
                code="model_not_found",
            )
        return canonical

    def canonical_model(self, model: str) -> str:
        """What ``_canonical_model`` says, for a stored name: unknown names stay as they are
        (a model removed from the configuration binds no request anyway)."""
        if self._canonical is None:
            return model
        return self._canonical.get(model, model)

    @staticmethod
    def _scope(actor: Actor) -> Scope:
        return Scope(actor)

    @staticmethod
    async def _audit(
        conn: AsyncConnection,
        actor: Actor,
        action: str,
        at: datetime,
        *,
        target: str | None = None,
        org_id: int | None = None,
        team_id: int | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        await audit_events.insert_event(
            conn,
            at=at,
            actor=actor.name,
            action=action,
            target=target,
            org_id=org_id,
            team_id=team_id,
            remote=actor.remote,
            detail=detail,
        )
