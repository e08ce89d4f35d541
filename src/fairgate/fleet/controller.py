"""The control plane: which replicas of the `deploy:` models run where, kept in the store.

    controller = FleetController(settings, config.models, store, registry, make_replica)
    await controller.load()        # nodes and replicas as the store last knew them
    server = await controller.serve(credentials)   # the agents' gRPC stream
    task = asyncio.create_task(controller.run())   # states, placement, desired states

Every `tick` it reads the operator's flags from the store (so `fairgate nodes cordon`
from another process reaches it), moves each node through healthy → unreachable →
lost (`fleet.states`), takes a lost node's replicas out of routing and the store, places
the replicas each model still wants (`inventory.place`: spread across nodes, GPUs free
by measured memory and processes, a tensor-parallel group in one NVLink domain, the
model's node labels) and sends each node whose replicas changed its whole desired
state, with a version kept in the store so it only grows.

A replica joins routing (`ReplicaRegistry.add`: health checks, breaker, metrics scrape)
when its agent reports it `ready`, and leaves when it reports anything else, when it
drains, or when its node is lost. A draining node's replicas are replaced first (make
before break): each keeps serving until its replacement elsewhere is ready, at most
`replacement_deadline` once the replacement is placed, for ever while none fits.

A restarted control plane loads the replicas the store holds, routes those that were
ready at once (the health checks judge them), and when their agents register again it
sends the same replica ids: the agents keep the engines they run, nothing is relaunched.

Of several control planes on one store only the holder of the store's lease
(``fleet_lease``, renewed every third of ``lease_ttl``) acts. The others are on
standby: they refuse the agents' streams with UNAVAILABLE (an agent dials the next
address it was given), place nothing, send nothing, and route the placed replicas as
the store holds them (``fleet.follow``). A standby whose try finds the lease expired
takes it, loads the nodes and replicas from the store as a restarted control plane
does and waits ``unreachable_after`` for the agents to register before placing: the
agents list what they run, so nothing is relaunched. A holder that cannot renew (the
store does not answer, or another took over) stops acting when its lease would have
expired, and ends the agents' streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import grpc

from fairgate.config.catalog import Model
from fairgate.config.fleet import ControlPlane
from fairgate.core.errors import StoreUnavailable
from fairgate.fleet.control import SERVER_OPTIONS, ControlPlaneService, NodeSeen
from fairgate.fleet.follow import ROUTED_STATE, StoreRoutes, replica_url
from fairgate.fleet.states import node_state
from fairgate.fleet.v1 import fleet_pb2, fleet_pb2_grpc
from fairgate.inventory.model import Inventory
from fairgate.inventory.place import Node, Placement, Plan, Want, place
from fairgate.store import Store, StoreConflict
from fairgate.store import fleet as rows
from fairgate.upstream.registry import ReplicaRegistry
from fairgate.upstream.replica import Replica

__all__ = ["FleetController", "NodeFlagsError", "ReplicaNotFound"]

log = logging.getLogger(__name__)

_EMPTY = Inventory(source="none")
_ROUTED_STATE = ROUTED_STATE
_REFUSED_FOR = 30.0
_ID_TRIES = 100  # suffixes tried for a new replica's id before the placement gives up
_STANDBY_REASON = (
    "this control plane is on standby: another holds the store's lease and places the replicas"
)


class NodeFlagsError(LookupError):
    """No node of that name has registered."""


class ReplicaNotFound(LookupError):
    """No placed replica has that id."""


@dataclass(slots=True)
class _Node:
    name: str
    labels: dict[str, str]
    inventory: Inventory
    state: str
    cordoned: bool
    draining: bool
    address: str
    desired_version: int
    registered_at: datetime
    last_heartbeat_at: datetime
    allocation_ends_at: datetime | None = None
    last_seen: float = 0.0
    connected: bool = False
    written_at: float = 0.0
    sent: tuple[bytes, ...] | None = None
    """The specs last sent, to send again only on a change."""
    stopping: bool = False
    """Its agent stopped a replica it was not asked to stop (it stops its engines as it
    shuts down): no new replicas until it registers again."""


@dataclass(slots=True)
class _Placed:
    id: str
    model: str
    node: str
    gpus: tuple[int, ...]
    port: int
    state: str
    restarts: int = 0
    pid: int = 0
    detail: str = ""
    drain: bool = False
    generation: int = 0
    replacing_since: float | None = None
    """Its node drains: since when a replacement is wanted elsewhere; it keeps serving
    until the replacement is ready (make before break)."""
    routed: Replica | None = field(default=None, repr=False)


def _node_from_row(row: rows.NodeRow) -> _Node:
    try:
        inventory = Inventory.from_json(row.inventory)
    except ValueError:
        inventory = _EMPTY
    return _Node(
        name=row.name,
        labels=dict(row.labels),
        inventory=inventory,
        state=row.state,
        cordoned=row.cordoned,
        draining=row.draining,
        address=row.address,
        desired_version=row.desired_version,
        registered_at=row.registered_at,
        last_heartbeat_at=row.last_heartbeat_at,
        allocation_ends_at=row.allocation_ends_at,
    )


_url = replica_url


def holder_name(settings: ControlPlane) -> str:
    """This control plane as a lease holder: its host and the agents' address, which no
    other process on the host can listen on at once, so a control plane restarted after
    a crash renews its own lease at once instead of waiting for it to expire; with port
    0 (any), the host, pid and a random part."""
    listen = settings.listen
    if listen.port:
        return f"{socket.gethostname()}:{listen.host}:{listen.port}"
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class FleetController:
    def __init__(
        self,
        settings: ControlPlane,
        models: Sequence[Model],
        store: Store,
        registry: ReplicaRegistry,
        make_replica: Callable[[Model, str, str], Replica],
        *,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        holder: str | None = None,
    ) -> None:
        self.settings = settings
        self.models = {m.name: m for m in models if m.deploy is not None}
        self.store = store
        self.registry = registry
        self._make_replica = make_replica
        self._clock = clock
        self._now = now
        self.service = ControlPlaneService(
            heartbeat_interval=settings.heartbeat_interval,
            hooks=self,
            accepting=lambda: self.leading,
        )
        self.holder = holder or holder_name(settings)
        self.leading = False
        """Holds the lease: places, sends desired states, accepts the agents' streams."""
        self._lease_until = 0.0
        self._renewed_at: float | None = None
        self._released = False
        """Stopping: the lease was given up and is not taken again."""
        self.standby = StoreRoutes(models, store, registry, make_replica)
        self.nodes: dict[str, _Node] = {}
        self.replicas: dict[str, _Placed] = {}
        self.plans: dict[str, Plan] = {}
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self.port: int | None = None
        self._settle_until = 0.0
        self._said: dict[str, tuple[int, str]] = {}
        self._next_port: dict[str, int] = {}
        """Per node address: the port after the last one handed out there."""
        self._refused: dict[tuple[str, str], float] = {}
        """(model, node) → until when the node takes no replica of the model: its agent
        refused one before launching it (port taken, engine missing, …)."""

    # --- start and stop ---------------------------------------------------------------

    async def load(self) -> None:
        """Take the lease if nobody holds it; holding it, the nodes and replicas the store
        holds, the ready replicas routed at once; on standby, the store's routes."""
        if await self._leads():
            await self._load()
        else:
            await self._follow()

    async def _load(self) -> None:
        self.nodes.clear()
        self.replicas.clear()
        self.plans.clear()
        start = self._clock()
        # Agents get one unreachable_after to register (and report what they run) before
        # anything is placed: a restarted control plane relaunches nothing that runs, and
        # a fresh one spreads over the nodes that dial in together instead of piling every
        # replica on the first.
        self._settle_until = start + self.settings.unreachable_after
        async with self.store.read() as conn:
            node_rows = await rows.list_nodes(conn)
            replica_rows = await rows.list_replicas(conn)
        for row in node_rows:
            node = _node_from_row(row)
            node.last_seen = start  # silence is counted from now: the gateway was down
            self.nodes[node.name] = node
        for r in replica_rows:
            if r.model not in self.models or r.node not in self.nodes:
                continue  # a model no longer deployed: its node is told on connect
            placed = _Placed(
                r.id,
                r.model,
                r.node,
                r.gpus,
                r.port,
                r.state,
                r.restarts,
                r.pid,
                r.detail,
                generation=r.generation,
            )
            self.replicas[r.id] = placed
            if r.state == _ROUTED_STATE and self.nodes[r.node].state != "lost":
                self._route(placed)
        log.info(
            "control plane: %d nodes and %d replicas from the store",
            len(self.nodes),
            len(self.replicas),
        )

    async def serve(self, credentials: grpc.ServerCredentials) -> grpc.aio.Server:
        """Start the agents' gRPC server on this loop; `self.port` is the bound port."""
        server = grpc.aio.server(options=SERVER_OPTIONS)
        fleet_pb2_grpc.add_ControlPlaneServicer_to_server(self.service, server)  # type: ignore[no-untyped-call]
        listen = self.settings.listen
        self.port = server.add_secure_port(f"{listen.host}:{listen.port}", credentials)
        await server.start()
        log.info("control plane listening on %s:%d (mutual TLS)", listen.host, self.port)
        return server

    async def run(self) -> None:
        """Tick until cancelled: every half heartbeat interval, or at once when woken."""
        period = min(1.0, self.settings.heartbeat_interval / 2)
        while True:
            try:
                await self.tick()
            except Exception:
                log.exception("control plane: a tick failed")
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), period)

    # --- the lease ----------------------------------------------------------------------

    async def _leads(self) -> bool:
        """Renew the lease when a third of it has passed (or try to take it, on standby);
        whether this control plane acts now. A renewal that fails keeps acting until the
        lease taken last would expire: by then another may hold it."""
        if self._released:
            return False
        ttl = self.settings.lease_ttl
        started = self._clock()
        due = self._renewed_at is None or started - self._renewed_at >= (
            ttl / 3 if self.leading else min(1.0, ttl / 3)
        )
        if due:
            self._renewed_at = started
            try:
                async with self.store.write() as conn:
                    took = await rows.take_lease(conn, self.holder, now=self._now(), ttl=ttl)
            except StoreConflict:
                took = False  # another's first insert won
            except StoreUnavailable as exc:
                if self.leading:
                    log.warning("control plane: the lease was not renewed: %s", exc)
                took = self.leading and started < self._lease_until
                self._renewed_at = None  # tried again at the next tick, not a third later
            else:
                if took:
                    self._lease_until = started + ttl
                elif self.leading:
                    log.warning("control plane: another control plane holds the lease now")
        else:
            took = self.leading
        took = took and self._clock() < self._lease_until
        if took != self.leading:
            log.warning(
                "control plane %s: %s",
                self.holder,
                "holds the lease: placing and commanding"
                if took
                else "on standby: another holds the lease",
            )
        self.leading = took
        return took

    async def _follow(self) -> None:
        """On standby: route what the store holds (a failed read keeps the routes)."""
        try:
            await self.standby.sync()
        except StoreUnavailable as exc:
            log.warning("control plane on standby: placed replicas not read: %s", exc)

    def _step_down(self) -> None:
        """Another holds the lease: route nothing of our own, end the agents' streams."""
        for placed in self.replicas.values():
            self._unroute(placed)
        self.nodes.clear()
        self.replicas.clear()
        self.plans.clear()
        self.service.evict()

    async def release(self) -> None:
        """At a clean stop: give the lease up, so a standby takes over at its next try;
        a tick still running does not take it again."""
        self._released = True
        if not self.leading:
            return
        self.leading = False
        try:
            async with self.store.write() as conn:
                await rows.drop_lease(conn, self.holder, now=self._now())
        except StoreUnavailable as exc:
            log.warning("control plane: the lease was not given up: %s", exc)

    # --- the agents' stream (ControlPlaneService's hooks) -------------------------------

    async def registered(self, seen: NodeSeen) -> None:
        if not self.leading:
            return  # the stream is refused: this control plane just stepped down
        now = self._now()
        ends = (
            datetime.fromtimestamp(seen.allocation_ends_at, UTC)
            if seen.allocation_ends_at
            else None
        )
        async with self._lock:
            async with self.store.write() as conn:
                row = await rows.save_node(
                    conn,
                    name=seen.name,
                    labels=seen.labels,
                    inventory=seen.inventory.to_json(),
                    address=seen.address,
                    state="healthy",
                    now=now,
                    allocation_ends_at=ends,
                )
            node = _node_from_row(row)
            node.inventory = seen.inventory
            node.last_seen = self._clock()
            node.written_at = node.last_seen
            node.connected = True
            previous = self.nodes.get(seen.name)
            if previous is not None and previous.state != "healthy":
                log.info("node %s is healthy again (was %s)", seen.name, previous.state)
            if previous is not None and previous.address != node.address:
                for moved in self._on(seen.name):  # its engines moved with it
                    self._unroute(moved)
            self.nodes[seen.name] = node
            for status in seen.running:
                known = self.replicas.get(status.replica_id)
                if known is not None and known.node == seen.name:
                    await self._apply(known, status, registering=True)
            await self._place()
            await self._push(node, force=True)
        self._wake.set()

    async def received(self, seen: NodeSeen, message: fleet_pb2.AgentMessage) -> None:
        node = self.nodes.get(seen.name)
        if node is None:
            return
        node.last_seen = self._clock()
        node.connected = True
        kind = message.WhichOneof("body")
        if kind == "heartbeat" and message.heartbeat.inventory_json:
            node.inventory = seen.inventory
        if kind == "heartbeat" and message.heartbeat.allocation_ends_at:
            ends = datetime.fromtimestamp(message.heartbeat.allocation_ends_at, UTC)
            node.allocation_ends_at = ends
        elif kind == "status":
            placed = self.replicas.get(message.status.replica_id)
            if placed is not None and placed.node == seen.name:
                async with self._lock:
                    await self._apply(placed, message.status)

    def disconnected(self, seen: NodeSeen) -> None:
        node = self.nodes.get(seen.name)
        if node is not None:
            node.connected = False
            log.warning("node %s: its agent's stream ended", seen.name)
        self._wake.set()

    async def _apply(
        self, placed: _Placed, status: fleet_pb2.ReplicaStatus, *, registering: bool = False
    ) -> None:
        """A state its agent reported: routing follows, the store records it."""
        if status.generation < placed.generation and not placed.drain:
            # What the agent still runs (or reports) is from before an operator's restart:
            # out of routing until the new generation reports.
            self._unroute(placed)
            return
        changed = (placed.state, placed.pid, placed.restarts) != (
            status.state,
            status.pid,
            status.restarts,
        )
        placed.state = status.state
        placed.pid = status.pid
        placed.restarts = status.restarts
        if status.state in ("failed", "crash_loop"):
            exit_code = f"exit code {status.exit_code}; " if status.exit_code else ""
            placed.detail = exit_code + " | ".join(status.tail[-5:])
        elif status.state == _ROUTED_STATE:
            placed.detail = ""
        node = self.nodes[placed.node]
        if status.state == _ROUTED_STATE and not placed.drain and node.state != "lost":
            self._route(placed)
        else:
            self._unroute(placed)
        if status.state == "failed" and not status.pid and not status.restarts:
            # refused before launch: placed again elsewhere (or here, on a new port, later)
            self._refused[(placed.model, placed.node)] = self._clock() + _REFUSED_FOR
            await self._delete(placed)
            log.warning(
                "replica %s refused by %s before launch: %s; %s takes no replica of %s for %g s",
                placed.id,
                placed.node,
                placed.detail,
                placed.node,
                placed.model,
                _REFUSED_FOR,
            )
            self._wake.set()
            return
        if status.state == "stopped" and placed.drain:
            await self._delete(placed)
            log.info("replica %s on %s drained and stopped", placed.id, placed.node)
            return
        if status.state == "stopped":
            # Stopped unasked (still wanted, this generation): its agent stops its engines
            # as it shuts down (--stop-engines). The acknowledged stop is the fence: the
            # replica is placed elsewhere at once, without waiting for the node to be lost.
            if not registering:
                node.stopping = True
            await self._delete(placed)
            log.warning(
                "replica %s: its agent on %s stopped it: placing it again at once",
                placed.id,
                placed.node,
            )
            self._wake.set()
            return
        if changed:
            if status.state in ("failed", "crash_loop"):
                log.warning(
                    "replica %s on %s is %s: %s",
                    placed.id,
                    placed.node,
                    status.state,
                    placed.detail,
                )
            async with self.store.write() as conn:
                await rows.update_replica(
                    conn,
                    placed.id,
                    now=self._now(),
                    state=placed.state,
                    pid=placed.pid,
                    restarts=placed.restarts,
                    detail=placed.detail[:4000],
                )

    # --- routing ------------------------------------------------------------------------

    def _route(self, placed: _Placed) -> None:
        if placed.routed is not None:
            return
        model = self.models[placed.model]
        replica = self._make_replica(
            model, placed.id, _url(self.nodes[placed.node].address, placed.port)
        )
        self.registry.add(replica)
        placed.routed = replica
        log.info("replica %s on %s joins routing at %s", placed.id, placed.node, replica.url)

    def _unroute(self, placed: _Placed) -> None:
        if placed.routed is None:
            return
        self.registry.remove(placed.model, placed.id)
        placed.routed = None
        log.info("replica %s on %s leaves routing (%s)", placed.id, placed.node, placed.state)

    # --- the periodic work --------------------------------------------------------------

    def _on(self, node: str) -> list[_Placed]:
        return [p for p in self.replicas.values() if p.node == node]

    async def tick(self) -> None:
        async with self._lock:
            was = self.leading
            if not await self._leads():
                if was:
                    self._step_down()
                await self._follow()
                return
            if not was:
                self.standby.clear()
                await self._load()
            await self._read_flags()
            await self._states()
            await self._place()
            for node in self.nodes.values():
                await self._push(node)
            await self._heard()

    async def _read_flags(self) -> None:
        """The operator's acts from the store: node flags and replica restarts (written
        by the admin API or by `fairgate nodes` / `fairgate replicas` in another process)."""
        async with self.store.read() as conn:
            stored = {row.name: row for row in await rows.list_nodes(conn)}
            generations = {r.id: r.generation for r in await rows.list_replicas(conn)}
        for name, node in self.nodes.items():
            row = stored.get(name)
            if row is not None:
                node.cordoned, node.draining = row.cordoned, row.draining
        for placed in self.replicas.values():
            generation = generations.get(placed.id, placed.generation)
            if generation > placed.generation:
                placed.generation = generation
                placed.state, placed.restarts, placed.detail = "placed", 0, ""
                self._unroute(placed)
                log.info(
                    "replica %s on %s restarted by an operator (generation %d)",
                    placed.id,
                    placed.node,
                    generation,
                )

    async def _states(self) -> None:
        now = self._clock()
        s = self.settings
        for node in self.nodes.values():
            answering = any(
                p.routed is not None and p.routed.healthy and p.routed.health_known
                for p in self._on(node.name)
            )
            state = node_state(
                now - node.last_seen,
                unreachable_after=s.unreachable_after,
                lost_after=s.lost_after,
                engines_answer=answering,
            )
            if state == node.state:
                continue
            if node.state == "lost":
                continue  # only its registration brings a lost node back
            log.warning(
                "node %s is %s (silent %.1f s%s)",
                node.name,
                state,
                now - node.last_seen,
                "; its engines still answer" if answering else "",
            )
            node.state = state
            async with self.store.write() as conn:
                await rows.update_node(conn, node.name, state=state)
            if state == "lost":
                await self._forget(node)

    async def _forget(self, node: _Node) -> None:
        """A lost node's replicas: out of routing and the store, to be placed elsewhere."""
        for placed in self._on(node.name):
            self._unroute(placed)
            await self._delete(placed)
            log.warning("replica %s was on lost node %s: placing it again", placed.id, node.name)

    def _ending(self, node: _Node) -> bool:
        """Within allocation_margin of its Slurm allocation's end: its replicas drain and
        are placed elsewhere, while the engines still run."""
        ends = node.allocation_ends_at
        if ends is None:
            return False
        return (ends - self._now()).total_seconds() <= self.settings.allocation_margin

    def _why_not(self, node: _Node, model: str, now: float) -> str:
        """Why `node` takes no new replica of `model` now; empty when it does."""
        if node.state != "healthy":
            return f"is {node.state}"
        if not node.connected:
            return "has no agent connected"
        if node.draining:
            return "is draining"
        if node.cordoned:
            return "is cordoned"
        if node.stopping:
            return "its agent stopped its engines (until it registers again)"
        if self._ending(node):
            assert node.allocation_ends_at is not None
            return f"its Slurm allocation ends at {node.allocation_ends_at.isoformat()}"
        until = self._refused.get((model, node.name), 0.0)
        if until > now:
            return f"refused a replica before launch, waits {until - now:.0f} s"
        return ""

    async def _place(self) -> None:
        if self._clock() < self._settle_until:
            return
        now = self._clock()
        for placed in self.replicas.values():
            if placed.drain:
                continue
            node = self.nodes[placed.node]
            leaving = node.draining or self._ending(node)
            if leaving and placed.replacing_since is None:
                placed.replacing_since = now
                why = "its node drains" if node.draining else "its Slurm allocation ends soon"
                log.info(
                    "replica %s on %s is replaced elsewhere before it drains (%s)",
                    placed.id,
                    placed.node,
                    why,
                )
            elif not leaving and placed.replacing_since is not None:
                placed.replacing_since = None  # uncordoned: it stays
        for model in self.models.values():
            deploy = model.deploy
            assert deploy is not None
            nodes = [
                Node(
                    name=node.name,
                    inventory=node.inventory,
                    labels=node.labels,
                    schedulable=not self._why_not(node, model.name, now),
                    claimed=frozenset(g for p in self._on(node.name) for g in p.gpus),
                    why_not=self._why_not(node, model.name, now),
                )
                for node in self.nodes.values()
            ]
            active = [
                p
                for p in self.replicas.values()
                if p.model == model.name and not p.drain and p.replacing_since is None
            ]
            for extra in sorted(active, key=lambda p: p.id)[deploy.replicas :]:
                extra.drain = True  # fewer wanted than run
                self._unroute(extra)
                active.remove(extra)
            want = Want(
                model.name,
                deploy.replicas,
                deploy.gpus_per_replica,
                deploy.tensor_parallel_size,
                deploy.node_labels,
            )
            plan = place(want, nodes, [Placement(p.model, p.node, p.gpus) for p in active])
            self.plans[model.name] = plan
            for new in plan.new:
                port = self._free_port(new.node)
                if port is None:
                    log.error(
                        "control plane: no free port left in control_plane.ports on %s",
                        new.node,
                    )
                    continue
                replica_id = await self._add_replica(model.name, new.node, new.gpus, port)
                self.replicas[replica_id] = _Placed(
                    replica_id, model.name, new.node, new.gpus, port, "placed"
                )
                nodes = [
                    n
                    if n.name != new.node
                    else Node(
                        n.name, n.inventory, n.labels, n.schedulable, n.claimed | set(new.gpus)
                    )
                    for n in nodes
                ]
                log.info("replica %s placed on %s (GPUs %s)", replica_id, new.node, new.gpus)
            await self._release(model.name, deploy.replicas, plan, now)
            said = (plan.missing, plan.reason)
            if plan.missing and self._said.get(model.name) != said:
                log.warning(
                    "model %s: %d of %d replicas cannot be placed: %s",
                    model.name,
                    plan.missing,
                    deploy.replicas,
                    plan.reason,
                )
            self._said[model.name] = said

    def _replacing(self, model: str) -> list[_Placed]:
        return sorted(
            (
                p
                for p in self.replicas.values()
                if p.model == model and not p.drain and p.replacing_since is not None
            ),
            key=lambda p: (p.replacing_since, p.id),
        )

    async def _release(self, model: str, wanted: int, plan: Plan, now: float) -> None:
        """Make before break: drain a replaced replica once the model keeps `wanted`
        replicas in routing without it, or once its replacement was placed and
        `replacement_deadline` has passed; while no replacement fits, it keeps serving.
        The store says `draining` at once, so the gateways that follow it stop routing
        there too."""
        replacing = self._replacing(model)
        if not replacing:
            return
        ready = sum(
            1
            for p in self.replicas.values()
            if p.model == model
            and not p.drain
            and p.replacing_since is None
            and p.routed is not None
        )
        serving = sum(1 for p in replacing if p.routed is not None)
        deadline = self.settings.replacement_deadline
        for placed in replacing:
            assert placed.replacing_since is not None
            routed = placed.routed is not None
            overdue = not plan.missing and now - placed.replacing_since >= deadline
            if not routed:
                why = "it was not serving"
            elif ready + serving - 1 >= wanted:
                why = "its replacement is ready"
            elif overdue:
                why = f"its replacement was not ready within {deadline:g} s"
            else:
                continue
            placed.drain = True
            placed.state = "draining"
            self._unroute(placed)
            serving -= routed
            async with self.store.write() as conn:
                await rows.update_replica(conn, placed.id, now=self._now(), state="draining")
            log.info("replica %s on %s drains: %s", placed.id, placed.node, why)

    def _free_port(self, node: str) -> int | None:
        """The next port on `node`'s machine after the last one handed out there that no
        replica there holds: a port just freed (its engine lost, a socket in TIME_WAIT)
        is the last to be reused. Ports are per machine, by the nodes' address: nodes
        on one host (agents on loopback, two Slurm jobs on one node) share its ports."""
        address = self.nodes[node].address
        used = {
            p.port
            for p in self.replicas.values()
            if p.node in self.nodes and self.nodes[p.node].address == address
        }
        first, last = self.settings.ports.first, self.settings.ports.last
        span = last - first + 1
        start = self._next_port.get(address, first)
        for step in range(span):
            port = first + (start - first + step) % span
            if port not in used:
                self._next_port[address] = first + (port - first + 1) % span
                return port
        return None

    def _specs(self, node: _Node) -> list[fleet_pb2.ReplicaSpec]:
        specs = []
        for placed in sorted(self._on(node.name), key=lambda p: p.id):
            model = self.models[placed.model]
            deploy = model.deploy
            assert deploy is not None
            key = deploy.key_file
            # A file is read by the agent at the same path on its node; a vault secret
            # is read here, by the control plane, and sent over the mutual-TLS stream
            # to the one node that runs the replica.
            in_vault = key is not None and key.vault is not None
            specs.append(
                fleet_pb2.ReplicaSpec(
                    replica_id=placed.id,
                    engine=deploy.engine,
                    model=deploy.model,
                    served_name=model.upstream_model,
                    port=placed.port,
                    gpus=list(placed.gpus),
                    tensor_parallel_size=deploy.tensor_parallel_size,
                    args=list(deploy.args),
                    api_key_ref=str(key) if key is not None and not in_vault else "",
                    api_key=key.read() if key is not None and in_vault else "",
                    drain=placed.drain,
                    host=self.settings.engine_host,
                    generation=placed.generation,
                )
            )
        return specs

    async def _push(self, node: _Node, *, force: bool = False) -> None:
        specs = self._specs(node)
        encoded = tuple(spec.SerializeToString(deterministic=True) for spec in specs)
        if not force and encoded == node.sent:
            return
        node.desired_version += 1
        async with self.store.write() as conn:
            await rows.update_node(conn, node.name, desired_version=node.desired_version)
        self.service.set_desired(node.name, specs, version=node.desired_version)
        node.sent = encoded

    async def _heard(self) -> None:
        """Persist when each connected node was last heard, every few heartbeats."""
        now = self._clock()
        every = 2 * self.settings.heartbeat_interval
        for node in self.nodes.values():
            if node.connected and now - node.written_at >= every:
                node.written_at = now
                node.last_heartbeat_at = self._now()
                async with self.store.write() as conn:
                    await rows.update_node(
                        conn, node.name, last_heartbeat_at=node.last_heartbeat_at
                    )

    # --- the operator's side ------------------------------------------------------------

    async def set_flags(
        self,
        name: str,
        *,
        cordoned: bool | None = None,
        draining: bool | None = None,
        actor: str | None = None,
        remote: str | None = None,
    ) -> dict[str, Any]:
        """Cordon, uncordon or drain a node (persisted, audited with `actor`); its view
        after the change."""
        async with self.store.write() as conn:
            row = await rows.set_flags(
                conn,
                name,
                cordoned=cordoned,
                draining=draining,
                actor=actor,
                remote=remote,
                now=self._now(),
            )
        if row is None:
            raise NodeFlagsError(name)
        await self.tick()
        return self.node_view(self.nodes[name]) if name in self.nodes else _row_view(row)

    async def restart(
        self, replica_id: str, *, actor: str, remote: str | None = None
    ) -> dict[str, Any]:
        """An operator's restart (persisted and audited): a higher generation, sent at
        once; its agent stops what runs, a crash loop included, and launches it afresh
        with a fresh restart count. Its view after the change. On standby the store
        decides (this control plane holds no replicas): the holder sends it at its next
        tick."""
        if self.leading and replica_id not in self.replicas:
            raise ReplicaNotFound(replica_id)
        async with self.store.write() as conn:
            row = await rows.restart_replica(
                conn, replica_id, now=self._now(), actor=actor, remote=remote
            )
        if row is None:
            raise ReplicaNotFound(replica_id)
        await self.tick()
        placed = self.replicas.get(replica_id)
        if placed is not None:
            return self.replica_view(placed)
        return {
            "id": row.id,
            "model": row.model,
            "node": row.node,
            "state": row.state,
            "generation": row.generation,
            "restarts": row.restarts,
        }

    def node_view(self, node: _Node) -> dict[str, Any]:
        return {
            "name": node.name,
            "state": node.state,
            "connected": node.connected,
            "cordoned": node.cordoned,
            "draining": node.draining,
            "address": node.address,
            "labels": node.labels,
            "gpus": len(node.inventory.gpus),
            "inventory": node.inventory.model_dump(mode="json"),
            "replicas": sorted(p.id for p in self._on(node.name)),
            "desired_version": node.desired_version,
            "last_heartbeat_at": node.last_heartbeat_at.isoformat(),
            "silent_seconds": round(max(0.0, self._clock() - node.last_seen), 1),
        }

    def nodes_view(self) -> list[dict[str, Any]]:
        return [self.node_view(node) for _, node in sorted(self.nodes.items())]

    async def _add_replica(self, model: str, node_name: str, gpus: Sequence[int], port: int) -> str:
        """Store a new replica; its id. ``{model}-{node}-{port}``, or that with ``~2``,
        ``~3`` … after it when taken: names may hold dashes, so two (model, node) pairs
        can spell the same id (model ``a-b`` on node ``c``, model ``a`` on node ``b-c``),
        and the store may hold rows of a model no longer deployed."""
        base = f"{model}-{node_name}-{port}"
        node = self.nodes[node_name]
        for n in range(1, _ID_TRIES + 1):
            replica_id = base if n == 1 else f"{base}~{n}"
            if replica_id in self.replicas:
                continue
            try:
                async with self.store.write() as conn:
                    await rows.add_replica(
                        conn,
                        id=replica_id,
                        model=model,
                        node=node_name,
                        gpus=gpus,
                        port=port,
                        desired_version=node.desired_version + 1,
                        now=self._now(),
                    )
            except StoreConflict:
                continue
            return replica_id
        raise StoreConflict(f"no free replica id after {base!r}")

    async def _delete(self, placed: _Placed) -> None:
        """``placed`` is no replica any more: out of memory and out of the store."""
        del self.replicas[placed.id]
        async with self.store.write() as conn:
            await rows.delete_replica(conn, placed.id)

    def replica_view(self, placed: _Placed) -> dict[str, Any]:
        node = self.nodes.get(placed.node)
        return {
            "id": placed.id,
            "model": placed.model,
            "node": placed.node,
            "gpus": list(placed.gpus),
            "port": placed.port,
            "url": _url(node.address if node else "", placed.port),
            "state": placed.state,
            "routed": placed.routed is not None,
            "healthy": placed.routed.healthy if placed.routed is not None else None,
            "draining": placed.drain,
            "replacing": placed.replacing_since is not None and not placed.drain,
            "generation": placed.generation,
            "restarts": placed.restarts,
            "pid": placed.pid,
            "detail": placed.detail,
        }

    def replicas_view(self) -> list[dict[str, Any]]:
        return [self.replica_view(p) for _, p in sorted(self.replicas.items())]

    def placement_view(self) -> list[dict[str, Any]]:
        out = []
        for name, model in sorted(self.models.items()):
            deploy = model.deploy
            assert deploy is not None
            plan = self.plans.get(name)
            replacing = self._replacing(name)
            reason = (
                plan.reason
                if plan is not None
                else "waiting for the agents to register after the start"
                if self.leading
                else _STANDBY_REASON
            )
            if replacing and plan is not None and plan.missing:
                reason = (
                    f"{len(replacing)} replica(s) on draining nodes keep serving until a "
                    f"replacement fits: {plan.reason}"
                )
            out.append(
                {
                    "model": name,
                    "engine": deploy.engine,
                    "wanted": deploy.replicas,
                    "gpus_per_replica": deploy.gpus_per_replica,
                    "tensor_parallel_size": deploy.tensor_parallel_size,
                    "node_labels": dict(deploy.node_labels),
                    "replicas": [
                        self.replica_view(p)
                        for _, p in sorted(self.replicas.items())
                        if p.model == name
                    ],
                    "missing": plan.missing if plan is not None else deploy.replicas,
                    "replacing": [p.id for p in replacing],
                    "reason": reason,
                }
            )
        return out


def _row_view(row: rows.NodeRow) -> dict[str, Any]:
    return {
        "name": row.name,
        "state": row.state,
        "cordoned": row.cordoned,
        "draining": row.draining,
        "address": row.address,
    }
