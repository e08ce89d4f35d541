"""The gateway's state derived from what SCIM holds, made true in one transaction.

    users    each SCIM User is the gateway user of the same userName, provisioned by SCIM
             (created if missing; a userName whose case alone changed renames the
             user in place); enabled while the SCIM User exists and is active,
             otherwise disabled: admin tokens revoked, every web, admin and single
             sign-on session of theirs deleted; a user an administrator disabled by
             hand stays disabled until enabled by hand (the audit log says who
             disabled them last), whatever SCIM says
    roles    an enabled provisioned user holds the (role, team) of every mapped group they
             are in, nested groups expanded (``fairgate.scim.membership``); the bindings
             SCIM granted are recorded in ``scim_grants`` and only those are ever removed,
             so a role granted by hand stays, even when it is the same pair

It runs after every SCIM write, in the write's transaction, and at start-up, so
a change interrupted half-way, a mapping edited in the configuration or a binding
removed by hand is repaired. It reads every provisioned resource each time (a
directory of some thousands of users is a few milliseconds of it). A mapped team
missing from the store is logged and counted, and granted once it exists.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import and_, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection

from fairgate.config.scim import Scim
from fairgate.observability.scim_metrics import ScimMetrics
from fairgate.scim.membership import Group, holders
from fairgate.store import (
    admin_tokens,
    audit_events,
    role_bindings,
    scim,
    teams,
    users,
    web_sessions,
)
from fairgate.store.scim import Grant, ResourceRow
from fairgate.store.tables import audit_events as events
from fairgate.store.tables import role_bindings as bindings_table

__all__ = ["ACTOR", "Reconciler", "Report"]

log = logging.getLogger("fairgate.scim")

ACTOR = "system:scim"
"""Who the audit log and ``created_by`` name for what SCIM changed."""


@dataclass
class Report:
    """What one reconciliation changed (counts)."""

    created: int = 0
    enabled: int = 0
    disabled: int = 0
    sessions_closed: int = 0
    granted: int = 0
    removed: int = 0
    unknown_teams: set[str] = field(default_factory=set)
    name_taken: set[str] = field(default_factory=set)  # userNames a user holds in another case


class Reconciler:
    """Applies :func:`fairgate.scim.membership.holders` and the users' ``active`` to the
    store (see the module docstring); ``reconcile`` runs in the caller's transaction."""

    def __init__(self, config: Scim, metrics: ScimMetrics | None = None) -> None:
        self._mapping = {name.casefold(): (g.role, g.team) for name, g in config.groups.items()}
        self._metrics = metrics

    async def missing_teams(self, conn: AsyncConnection) -> list[tuple[str, str]]:
        """``(group, team)`` of every mapping whose team is not in the store."""
        missing = []
        for group, (_, team) in sorted(self._mapping.items()):
            if await teams.by_name(conn, team) is None:
                missing.append((group, team))
        return missing

    async def reconcile(self, conn: AsyncConnection, now: datetime) -> Report:
        report = Report()
        rows = await scim.list_resources(conn, ("User", "Group"))
        people = {r.id: r for r in rows if r.kind == "User"}
        groups = {r.id: _group(r) for r in rows if r.kind == "Group"}
        await self._provision(conn, people.values(), now, report)
        active = {r.name for r in people.values() if r.active}
        enabled = await self._switch(conn, active, now, report)
        held = holders(groups, self._mapping)
        wanted: dict[str, set[tuple[str, str]]] = {}
        for resource_id, pairs in held.items():
            person = people.get(resource_id)
            if person is not None and person.name in enabled:
                wanted.setdefault(person.name, set()).update(pairs)
        await self._roles(conn, enabled, wanted, now, report)
        self._count(report)
        return report

    async def _provision(
        self, conn: AsyncConnection, people: Iterable[ResourceRow], now: datetime, report: Report
    ) -> None:
        """Every SCIM User's gateway user exists and is recorded as provisioned."""
        managed = await scim.managed_users(conn)
        names = {name for name, _ in managed.values()}
        for person in people:
            if person.name in names:
                continue
            user = await users.by_name(conn, person.name)
            if user is None:
                former = [
                    (user_id, name)
                    for user_id, (name, _) in managed.items()
                    if name.casefold() == person.name.casefold()
                ]
                if len(former) == 1:
                    # The provider changed only the case of the userName: the same person,
                    # renamed in place (id, bindings, keys and tokens kept). A new user
                    # beside the old one, disabled, would refuse every case of the name
                    # at single sign-on (``users.disabled_namesake``).
                    user_id, name = former[0]
                    await users.rename(conn, user_id, person.name)
                    names.discard(name)
                    names.add(person.name)
                    await _audit(
                        conn, "user.renamed", now, person.name, {"by": "scim", "from": name}
                    )
                    continue
            if user is None:
                if not person.active:
                    continue  # an inactive newcomer needs no gateway user yet
                if await users.namesake(conn, person.name):
                    # a user made by hand holds the name in another case: names are
                    # unique in any case (the store refuses the insert), and adopting
                    # that user would hand SCIM someone it did not provision
                    log.warning(
                        "scim: %s not provisioned: a user of that name in another case exists",
                        person.name,
                    )
                    report.name_taken.add(person.name)
                    continue
                user = await users.insert_user(conn, name=person.name, org_id=None, now=now)
                report.created += 1
                await _audit(conn, "user.created", now, person.name, {"by": "scim"})
            await scim.adopt(conn, user.id, now)

    async def _switch(
        self, conn: AsyncConnection, active: set[str], now: datetime, report: Report
    ) -> dict[str, int]:
        """Enable the provisioned users SCIM holds active, disable the others; their ids."""
        enabled: dict[str, int] = {}
        for user_id, (name, is_enabled) in (await scim.managed_users(conn)).items():
            if name in active:
                if not is_enabled and await _disabled_by_hand(conn, name):
                    continue  # an administrator's decision: SCIM does not undo it
                enabled[name] = user_id
                if not is_enabled and await users.enable(conn, name) is not None:
                    report.enabled += 1
                    await _audit(conn, "user.enabled", now, name, {"by": "scim"})
                continue
            live = await admin_tokens.live_tokens(conn, name) if is_enabled else []
            if await users.disable(conn, name, now) is not None:
                report.disabled += 1
                await _audit(conn, "user.disabled", now, name, {"by": "scim"})
                for token in live:  # revoked with the user: each audited as on its own
                    await audit_events.insert_event(
                        conn,
                        at=now,
                        actor=ACTOR,
                        action="admin_token.revoked",
                        target=f"admin_token:{token.id}",
                        detail={"user": name, "prefix": token.prefix, "by": "scim"},
                    )
            closed = await web_sessions.close_user(conn, user_id, name)
            report.sessions_closed += closed
        return enabled

    async def _roles(
        self,
        conn: AsyncConnection,
        enabled: Mapping[str, int],
        wanted: Mapping[str, set[tuple[str, str]]],
        now: datetime,
        report: Report,
    ) -> None:
        team_ids: dict[str, int | None] = {}
        desired: set[Grant] = set()
        for name, pairs in wanted.items():
            for role, team in pairs:
                if team not in team_ids:
                    found = await teams.by_name(conn, team)
                    team_ids[team] = None if found is None else found.id
                team_id = team_ids[team]
                if team_id is None:
                    report.unknown_teams.add(team)
                    continue
                desired.add((enabled[name], role, team_id))
        recorded = await scim.grants(conn)
        for grant in sorted(recorded - desired):
            if await _unbind(conn, grant):
                report.removed += 1
                await _audit_role(conn, "role.revoked", now, grant)
            await scim.drop_grant(conn, grant)
        for grant in sorted(desired):
            if await _bound(conn, grant):
                continue  # SCIM's, still there; or granted by hand, and never recorded as SCIM's
            await _bind(conn, grant, now)
            if grant not in recorded:
                await scim.add_grant(conn, grant, now)
            report.granted += 1
            await _audit_role(conn, "role.granted", now, grant)

    def _count(self, report: Report) -> None:
        for team in sorted(report.unknown_teams):
            log.warning("scim: a mapped group names team %r, which is not in the store", team)
        if self._metrics is None:
            return
        self._metrics.changed("user_created", report.created)
        self._metrics.changed("user_enabled", report.enabled)
        self._metrics.changed("user_disabled", report.disabled)
        self._metrics.changed("sessions_closed", report.sessions_closed)
        self._metrics.changed("role_granted", report.granted)
        self._metrics.changed("role_removed", report.removed)
        for _ in report.unknown_teams:
            self._metrics.unknown_team()


_RENAMES_FOLLOWED = 16
"""How many of a user's earlier names ``_disabled_by_hand`` follows back."""


def _group(row: ResourceRow) -> Group:
    members = row.body.get("members") or ()
    ids = tuple(str(m["value"]) for m in members if isinstance(m, dict) and m.get("value"))
    return Group(row.name, ids)


async def _disabled_by_hand(conn: AsyncConnection, name: str) -> bool:
    """Whether the latest enabling or disabling of user ``name`` is a disable that was not
    SCIM's (the audit log, written in the same transaction as every switch, says who).
    The user's earlier names count too, up to its rename from each, followed through
    SCIM's ``user.renamed`` events, so a user renamed by a case-only change of its
    ``userName`` keeps an administrator's decision taken under the old spelling; names
    are compared exactly, since another user may hold a name differing only in case (or
    take an earlier name after the rename)."""
    target, before = f"user:{name}", None
    held = [events.c.target == target]
    seen = {target}
    for _ in range(_RENAMES_FOLLOWED):
        renamed = select(events.c.detail, events.c.seq).where(
            events.c.target == target, events.c.action == "user.renamed"
        )
        if before is not None:
            renamed = renamed.where(events.c.seq < before)
        row = (await conn.execute(renamed.order_by(events.c.seq.desc()).limit(1))).first()
        former = row.detail.get("from") if row is not None and row.detail else None
        if row is None or not isinstance(former, str) or f"user:{former}" in seen:
            break
        target, before = f"user:{former}", row.seq
        seen.add(target)
        held.append(and_(events.c.target == target, events.c.seq < before))
    query = (
        select(events.c.action, events.c.actor)
        .where(or_(*held), events.c.action.in_(("user.disabled", "user.enabled")))
        .order_by(events.c.seq.desc())
        .limit(1)
    )
    last = (await conn.execute(query)).first()
    return last is not None and last.action == "user.disabled" and last.actor != ACTOR


async def _bound(conn: AsyncConnection, grant: Grant) -> bool:
    user_id, role, team_id = grant
    query = select(bindings_table.c.id).where(
        bindings_table.c.user_id == user_id,
        bindings_table.c.role == role,
        bindings_table.c.scope_kind == "team",
        bindings_table.c.scope_id == team_id,
    )
    return (await conn.execute(query)).first() is not None


async def _bind(conn: AsyncConnection, grant: Grant, now: datetime) -> None:
    user_id, role, team_id = grant
    await role_bindings.insert_binding(
        conn,
        user_id=user_id,
        role=role,
        scope_kind="team",
        scope_id=team_id,
        created_by=ACTOR,
        now=now,
    )


async def _unbind(conn: AsyncConnection, grant: Grant) -> bool:
    """Remove SCIM's binding of ``grant``; one granted by hand since (the pair revoked by
    hand, then granted again) is not SCIM's to take, though its grant is still recorded."""
    user_id, role, team_id = grant
    return await role_bindings.delete_binding(
        conn,
        user_id=user_id,
        role=role,
        scope_kind="team",
        scope_id=team_id,
        where=bindings_table.c.created_by == ACTOR,
    )


async def _audit(
    conn: AsyncConnection, action: str, now: datetime, name: str, detail: Mapping[str, str]
) -> None:
    await audit_events.insert_event(
        conn, at=now, actor=ACTOR, action=action, target=f"user:{name}", detail=detail
    )


async def _audit_role(conn: AsyncConnection, action: str, now: datetime, grant: Grant) -> None:
    user_id, role, team_id = grant
    user = await users.by_id(conn, user_id)
    team = await teams.by_id(conn, team_id)
    await audit_events.insert_event(
        conn,
        at=now,
        actor=ACTOR,
        action=action,
        target=f"user:{user.name if user else user_id}",
        org_id=team.org_id if team else None,
        team_id=team_id,
        detail={"role": role, "scope": f"team {team.name if team else team_id}", "by": "scim"},
    )
