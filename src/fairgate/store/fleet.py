"""The control plane's durable state: nodes and the replicas placed on them.

Functions run in the caller's transaction. The control plane writes a node when its
agent registers and on every state change (heartbeats update ``last_heartbeat_at``
at most every few seconds); the operator's flags (``cordoned``, ``draining``) are
written by the admin API and the CLI and read back by the control plane, so they
survive restarts and reach it from either.

The lease (``fleet_lease``) says which control plane acts: ``take_lease`` renews it for
its holder, or takes it over once it has expired, with one conditional update, so of
two control planes on one store only one holds it at a time (on SQLite the writers
queue on the write lock; on PostgreSQL the second update waits for the first and then
finds the condition false). Expiry is the writers' wall clock: the control planes'
clocks must agree to well within the lease's length.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from fairgate.store.audit_events import insert_event
from fairgate.store.tables import fleet_lease, fleet_nodes, fleet_replicas

__all__ = [
    "LEASE",
    "LeaseRow",
    "NodeRow",
    "ReplicaRow",
    "add_replica",
    "delete_replica",
    "drop_lease",
    "list_nodes",
    "list_replicas",
    "read_lease",
    "restart_replica",
    "save_node",
    "set_flags",
    "take_lease",
    "update_node",
    "update_replica",
]

_N = fleet_nodes.c
_R = fleet_replicas.c
_L = fleet_lease.c

LEASE = "control-plane"
"""The one lease the control planes of a store contend for."""


@dataclass(frozen=True, slots=True)
class LeaseRow:
    holder: str
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class NodeRow:
    name: str
    labels: Mapping[str, str]
    inventory: str
    state: str
    cordoned: bool
    draining: bool
    address: str
    desired_version: int
    allocation_ends_at: datetime | None
    registered_at: datetime
    last_heartbeat_at: datetime


@dataclass(frozen=True, slots=True)
class ReplicaRow:
    id: str
    model: str
    node: str
    gpus: tuple[int, ...]
    port: int
    state: str
    restarts: int
    pid: int
    detail: str
    desired_version: int
    created_at: datetime
    updated_at: datetime
    generation: int = 0


def _node(row: Any) -> NodeRow:
    return NodeRow(
        name=row.name,
        labels=dict(row.labels),
        inventory=row.inventory,
        state=row.state,
        cordoned=row.cordoned,
        draining=row.draining,
        address=row.address,
        desired_version=row.desired_version,
        allocation_ends_at=row.allocation_ends_at,
        registered_at=row.registered_at,
        last_heartbeat_at=row.last_heartbeat_at,
    )


def _replica(row: Any) -> ReplicaRow:
    return ReplicaRow(
        id=row.id,
        model=row.model,
        node=row.node,
        gpus=tuple(row.gpus),
        port=row.port,
        state=row.state,
        restarts=row.restarts,
        pid=row.pid,
        detail=row.detail,
        desired_version=row.desired_version,
        created_at=row.created_at,
        updated_at=row.updated_at,
        generation=row.generation,
    )


async def list_nodes(conn: AsyncConnection) -> list[NodeRow]:
    rows = await conn.execute(select(fleet_nodes).order_by(_N.name))
    return [_node(row) for row in rows]


async def save_node(
    conn: AsyncConnection,
    *,
    name: str,
    labels: Mapping[str, str],
    inventory: str,
    address: str,
    state: str,
    now: datetime,
    allocation_ends_at: datetime | None = None,
) -> NodeRow:
    """Record a registration: a new node, or a known one's inventory, labels and address
    (its flags and desired version are kept)."""
    values = {
        "labels": dict(labels),
        "inventory": inventory,
        "address": address,
        "state": state,
        "allocation_ends_at": allocation_ends_at,
        "last_heartbeat_at": now,
    }
    changed = await conn.execute(update(fleet_nodes).where(_N.name == name).values(**values))
    if changed.rowcount == 0:
        await conn.execute(
            insert(fleet_nodes).values(
                name=name,
                cordoned=False,
                draining=False,
                desired_version=0,
                registered_at=now,
                **values,
            )
        )
    row = (await conn.execute(select(fleet_nodes).where(_N.name == name))).one()
    return _node(row)


async def update_node(conn: AsyncConnection, name: str, **values: Any) -> bool:
    """Set columns of one node (state, last_heartbeat_at, desired_version, …)."""
    result = await conn.execute(update(fleet_nodes).where(_N.name == name).values(**values))
    return result.rowcount == 1


async def set_flags(
    conn: AsyncConnection,
    name: str,
    *,
    cordoned: bool | None = None,
    draining: bool | None = None,
    actor: str | None = None,
    remote: str | None = None,
    now: datetime | None = None,
) -> NodeRow | None:
    """The operator's flags of a node; None when no node has that name. With ``actor``
    (and ``now``) the change is audited: ``node.drained``, ``node.cordoned`` or
    ``node.uncordoned``."""
    values: dict[str, bool] = {}
    if cordoned is not None:
        values["cordoned"] = cordoned
    if draining is not None:
        values["draining"] = draining
    if values:
        await conn.execute(update(fleet_nodes).where(_N.name == name).values(**values))
    row = (await conn.execute(select(fleet_nodes).where(_N.name == name))).first()
    if row is None:
        return None
    if actor is not None and now is not None and values:
        action = "node.drained" if draining else "node.cordoned" if cordoned else "node.uncordoned"
        await insert_event(
            conn, at=now, actor=actor, action=action, target=f"node:{name}", remote=remote
        )
    return _node(row)


async def list_replicas(conn: AsyncConnection, *, model: str | None = None) -> list[ReplicaRow]:
    query = select(fleet_replicas).order_by(_R.model, _R.node, _R.id)
    if model is not None:
        query = query.where(_R.model == model)
    return [_replica(row) for row in await conn.execute(query)]


async def add_replica(
    conn: AsyncConnection,
    *,
    id: str,
    model: str,
    node: str,
    gpus: Sequence[int],
    port: int,
    desired_version: int,
    now: datetime,
) -> None:
    await conn.execute(
        insert(fleet_replicas).values(
            id=id,
            model=model,
            node=node,
            gpus=list(gpus),
            port=port,
            state="placed",
            restarts=0,
            pid=0,
            detail="",
            desired_version=desired_version,
            created_at=now,
            updated_at=now,
        )
    )


async def update_replica(conn: AsyncConnection, id: str, *, now: datetime, **values: Any) -> bool:
    result = await conn.execute(
        update(fleet_replicas).where(_R.id == id).values(updated_at=now, **values)
    )
    return result.rowcount == 1


async def delete_replica(conn: AsyncConnection, id: str) -> bool:
    result = await conn.execute(delete(fleet_replicas).where(_R.id == id))
    return result.rowcount == 1


async def take_lease(
    conn: AsyncConnection, holder: str, *, now: datetime, ttl: float, name: str = LEASE
) -> bool:
    """Renew the lease for `holder`, or take it when nobody holds it or its holder let it
    expire; True when `holder` holds it until ``now + ttl``. A concurrent first insert
    fails the transaction (StoreConflict): nobody took it then."""
    expires = now + timedelta(seconds=ttl)
    taken = await conn.execute(
        update(fleet_lease)
        .where(_L.name == name, (_L.holder == holder) | (_L.expires_at <= now))
        .values(holder=holder, expires_at=expires)
    )
    if taken.rowcount == 1:
        return True
    if (await conn.execute(select(_L.name).where(_L.name == name))).first() is not None:
        return False  # held by another, not expired
    await conn.execute(insert(fleet_lease).values(name=name, holder=holder, expires_at=expires))
    return True


async def read_lease(conn: AsyncConnection, name: str = LEASE) -> LeaseRow | None:
    row = (await conn.execute(select(fleet_lease).where(_L.name == name))).first()
    return None if row is None else LeaseRow(row.holder, row.expires_at)


async def drop_lease(
    conn: AsyncConnection, holder: str, *, now: datetime, name: str = LEASE
) -> bool:
    """Give the lease up at a clean stop (it expires now), if `holder` still holds it: a
    standby takes over at its next try instead of after the lease's length."""
    dropped = await conn.execute(
        update(fleet_lease).where(_L.name == name, _L.holder == holder).values(expires_at=now)
    )
    return dropped.rowcount == 1


async def restart_replica(
    conn: AsyncConnection, id: str, *, now: datetime, actor: str, remote: str | None = None
) -> ReplicaRow | None:
    """An operator's restart, audited as ``replica.restarted``: the generation raised,
    the failure and its restart count cleared (the state back to ``placed`` until its
    agent reports); None when no replica has that id. The control plane sends the new
    generation, and the agent stops what runs under the old one (a crash loop included)
    and launches it afresh."""
    result = await conn.execute(
        update(fleet_replicas)
        .where(_R.id == id)
        .values(
            generation=_R.generation + 1,
            state="placed",
            restarts=0,
            detail="",
            updated_at=now,
        )
    )
    if result.rowcount != 1:
        return None
    replica = _replica((await conn.execute(select(fleet_replicas).where(_R.id == id))).one())
    await insert_event(
        conn,
        at=now,
        actor=actor,
        action="replica.restarted",
        target=f"replica:{id}",
        remote=remote,
        detail={"model": replica.model, "node": replica.node, "generation": replica.generation},
    )
    return replica
