"""The control plane's side of the agents' streams: registration, heartbeats, state.

`ControlPlaneService` accepts one stream per node over mutual TLS. The first message
must be a `Register` whose node name is the identity of the client certificate; any
other first message, or another node's name, ends the stream with PERMISSION_DENIED
and a log line naming the certificate and the claim. A registered node's inventory,
labels and running replicas are kept in `nodes`; it is sent the current desired state
at once (on every connect, so a reconnecting agent reconciles to the whole of it) and
every time it changes.

The stream only carries messages: a `Hooks` (the fleet controller,
`fairgate.fleet.controller`) is told of each registration before the first desired
state goes down, so it can decide that state, and of every message and disconnect.

One agent per node: a registration for a node whose stream is open and was heard within
two heartbeat intervals is refused with ALREADY_EXISTS (a copied certificate or a second
agent started by mistake; the one connected keeps the node); a stream silent longer (its
connection half-open after a crash or a cut) is ended with ABORTED by the new one, and
nothing a superseded stream says is recorded.

A control plane on standby (another holds the store's lease: ``accepting`` answers
False) refuses every stream with UNAVAILABLE before reading it, and `evict` ends the
open ones the same way when it steps down, so the agents dial the control plane that
holds the lease.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Protocol

import grpc

from fairgate.fleet.identity import names_of, refusal
from fairgate.fleet.v1 import fleet_pb2, fleet_pb2_grpc
from fairgate.inventory.model import Inventory

__all__ = [
    "SERVER_OPTIONS",
    "ControlPlaneService",
    "Hooks",
    "NodeSeen",
    "peer_host",
    "server_credentials",
]

log = logging.getLogger(__name__)

_STANDBY = "this control plane is on standby: another holds the lease"
_NONE_YET = fleet_pb2.DesiredState()
"""A node's desired state before any was set (sent as version 0)."""


@dataclass(slots=True)
class NodeSeen:
    name: str
    inventory: Inventory
    labels: dict[str, str]
    running: list[fleet_pb2.ReplicaStatus]
    last_seen: float
    applied_version: int = 0
    connected: bool = True
    statuses: dict[str, fleet_pb2.ReplicaStatus] = field(default_factory=dict)
    address: str = ""
    """The host the stream came from: where the node's engines are reached."""
    allocation_ends_at: int = 0


class Hooks(Protocol):
    async def registered(self, node: NodeSeen) -> None: ...

    async def received(self, node: NodeSeen, message: fleet_pb2.AgentMessage) -> None: ...

    def disconnected(self, node: NodeSeen) -> None: ...


def peer_host(peer: str) -> str:
    """The host of a gRPC peer string: `ipv4:10.0.0.5:50123`, `ipv6:[::1]:50123`."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6":
        host = rest.rpartition(":")[0]
        return host.strip("[]")
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    return rest


SERVER_OPTIONS: list[tuple[str, int]] = [
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 1000),
    ("grpc.http2.max_ping_strikes", 0),
]
"""The agents' gRPC server: it accepts the agents' keepalive pings (every 10 s, more
often than gRPC's default policy allows, which would end their streams with
too_many_pings)."""


def server_credentials(
    cert_pem: bytes, key_pem: bytes, client_ca_pem: bytes
) -> grpc.ServerCredentials:
    """Mutual TLS: the server's certificate, and client certificates required from the CA."""
    return grpc.ssl_server_credentials(
        [(key_pem, cert_pem)], root_certificates=client_ca_pem, require_client_auth=True
    )


class ControlPlaneService(fleet_pb2_grpc.ControlPlaneServicer):
    def __init__(
        self,
        *,
        heartbeat_interval: float = 5.0,
        hooks: Hooks | None = None,
        accepting: Callable[[], bool] = lambda: True,
    ) -> None:
        self.nodes: dict[str, NodeSeen] = {}
        self.hooks = hooks
        self._accepting = accepting
        self.refusals = 0
        self._heartbeat_interval = heartbeat_interval
        self._alive_within = 2 * heartbeat_interval
        """A node's open stream heard within this is alive: another registration of the
        node is refused meanwhile; one silent longer (a half-open connection) is ended by it."""
        self._desired: dict[str, fleet_pb2.DesiredState] = {}
        self._changed: dict[str, asyncio.Event] = {}

    def desired(self, node: str) -> fleet_pb2.DesiredState:
        return self._desired.get(
            node,
            fleet_pb2.DesiredState(version=0, heartbeat_interval_seconds=self._heartbeat_interval),
        )

    def set_desired(
        self, node: str, replicas: list[fleet_pb2.ReplicaSpec], *, version: int | None = None
    ) -> int:
        """Replace a node's desired replicas; the new version reaches it at once if connected.

        `version` (the controller's, kept in the store so it grows across restarts)
        defaults to the last one sent plus one."""
        if version is None:
            version = self.desired(node).version + 1
        self._desired[node] = fleet_pb2.DesiredState(
            version=version, replicas=replicas, heartbeat_interval_seconds=self._heartbeat_interval
        )
        self._changed.setdefault(node, asyncio.Event()).set()
        return version

    def evict(self) -> None:
        """End every open stream with UNAVAILABLE (this control plane is on standby now)."""
        for changed in self._changed.values():
            changed.set()

    async def Connect(
        self,
        request_iterator: AsyncIterator[fleet_pb2.AgentMessage],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[fleet_pb2.ControlMessage]:
        if not self._accepting():
            await context.abort(grpc.StatusCode.UNAVAILABLE, _STANDBY)
            return
        names = names_of(context.auth_context())
        first = await anext(aiter(request_iterator), None)
        claimed = (
            first.register.node_name if first is not None and first.HasField("register") else ""
        )
        why = refusal(names, claimed)
        if why is not None or first is None:
            self.refusals += 1
            log.warning("agent stream refused from %s: %s", context.peer(), why)
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, "node identity refused")
            return
        register = first.register
        try:
            inventory = Inventory.from_json(register.inventory_json or '{"source": "none"}')
        except ValueError as exc:
            log.warning("node %s sent an inventory that does not validate: %s", claimed, exc)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "inventory does not validate")
            return
        node = NodeSeen(
            name=claimed,
            inventory=inventory,
            labels=dict(register.labels),
            running=list(register.running),
            last_seen=time.monotonic(),
            applied_version=register.applied_version,
            address=peer_host(context.peer()),
            allocation_ends_at=register.allocation_ends_at,
        )
        previous = self.nodes.get(claimed)
        if previous is not None and previous.connected:
            silent = node.last_seen - previous.last_seen
            if silent < self._alive_within:
                # Two agents as one node (a copied certificate, a second agent started by
                # mistake): the one already connected keeps the node; taking turns would
                # mix two machines' engines, inventories and addresses in one node.
                self.refusals += 1
                log.warning(
                    "agent stream refused from %s: node %s already has an agent connected "
                    "from %s, heard %.1f s ago",
                    context.peer(),
                    claimed,
                    previous.address,
                    silent,
                )
                await context.abort(
                    grpc.StatusCode.ALREADY_EXISTS, "another agent is connected as this node"
                )
                return
            log.warning(
                "node %s registered again from %s; its last stream, from %s, was silent "
                "%.1f s and is ended",
                claimed,
                node.address,
                previous.address,
                silent,
            )
        self.nodes[claimed] = node
        log.info(
            "node %s registered (%d GPUs, %d replicas running)",
            claimed,
            len(inventory.gpus),
            len(node.running),
        )
        if self.hooks is not None:
            await self.hooks.registered(node)
        changed = self._changed.setdefault(claimed, asyncio.Event())
        if previous is not None and previous.connected:
            previous.connected = False
            changed.set()  # the superseded stream wakes and ends
        reader = asyncio.create_task(self._read(node, request_iterator))
        sent: object = None
        try:
            while True:
                if self.nodes.get(claimed) is not node:
                    await context.abort(
                        grpc.StatusCode.ABORTED, "another stream registered as this node"
                    )
                    return
                if sent is not None and not self._accepting():
                    log.warning(
                        "node %s: its stream ended, this control plane is on standby", claimed
                    )
                    await context.abort(grpc.StatusCode.UNAVAILABLE, _STANDBY)
                    return
                current = self._desired.get(claimed, _NONE_YET)
                if current is not sent:
                    # Compared after each send, not only on a wake: a change made while
                    # the last one was being written is sent too, never cleared away.
                    sent = current
                    yield fleet_pb2.ControlMessage(desired=self.desired(claimed))
                    continue
                if reader.done():
                    return
                changed.clear()
                if self._desired.get(claimed, _NONE_YET) is not sent or (
                    self.nodes.get(claimed) is not node or not self._accepting()
                ):
                    continue
                waiter = asyncio.create_task(changed.wait())
                done, _ = await asyncio.wait({waiter, reader}, return_when=asyncio.FIRST_COMPLETED)
                if waiter not in done:
                    waiter.cancel()
        finally:
            reader.cancel()
            node.connected = False
            if self.hooks is not None and self.nodes.get(claimed) is node:
                self.hooks.disconnected(node)

    def _names(self, node: NodeSeen, replica_id: str) -> bool:
        """Whether `replica_id` is one of the node's: kept already, in its desired state
        or in its registration. What else an agent reports is not kept, so a stream of
        made-up ids cannot grow the control plane's memory."""
        return (
            replica_id in node.statuses
            or any(r.replica_id == replica_id for r in self.desired(node.name).replicas)
            or any(r.replica_id == replica_id for r in node.running)
        )

    async def _read(self, node: NodeSeen, messages: AsyncIterator[fleet_pb2.AgentMessage]) -> None:
        async for message in messages:
            if self.nodes.get(node.name) is not node:
                return  # superseded by a later stream of the node: nothing it says counts
            node.last_seen = time.monotonic()
            kind = message.WhichOneof("body")
            if kind == "heartbeat" and message.heartbeat.inventory_json:
                try:
                    node.inventory = Inventory.from_json(message.heartbeat.inventory_json)
                except ValueError as exc:
                    log.warning("node %s: refreshed inventory refused: %s", node.name, exc)
            elif kind == "status" and self._names(node, message.status.replica_id):
                node.statuses[message.status.replica_id] = message.status
            elif kind == "applied":
                node.applied_version = message.applied.version
            if self.hooks is not None:
                try:
                    await self.hooks.received(node, message)
                except Exception:
                    log.exception("node %s: a %s message was not recorded", node.name, kind)
