"""Routing to the placed replicas as the store holds them, for a gateway that does not
place them: one without ``control_plane:``, or a control plane on standby.

    routes = StoreRoutes(config.models, store, registry, make_replica)
    task = asyncio.create_task(routes.run())   # every second: the store's replicas

The control plane that holds the lease writes each replica's state as its agent reports
it (``fleet_replicas``) and the nodes' flags and states (``fleet_nodes``). Every
``interval`` this reads both and makes the registry agree, through
``ReplicaRegistry.add``/``remove`` like the control plane does: a replica of a
``deploy:`` model joins routing when it is ``ready`` on a node that is not lost (on a
draining node too: it serves until its replacement is ready, when the control plane
writes it ``draining``), at ``http://ADDRESS:PORT`` of its node, and leaves it on any
other state, when
its row is gone, or when its node's address changed (it joins again at the new one). A
store that does not answer leaves the routes as they are: the engines are judged by the
gateway's own health checks meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from fairgate.config.catalog import Model
from fairgate.core.errors import StoreUnavailable
from fairgate.store import Store
from fairgate.store import fleet as rows
from fairgate.upstream.registry import ReplicaRegistry
from fairgate.upstream.replica import Replica

__all__ = ["StoreRoutes", "replica_url"]

log = logging.getLogger(__name__)

ROUTED_STATE = "ready"


def replica_url(address: str, port: int) -> str:
    """Where a placed replica's engine is reached: its node's address and its port."""
    host = f"[{address}]" if ":" in address else address
    return f"http://{host or '127.0.0.1'}:{port}"


class StoreRoutes:
    def __init__(
        self,
        models: Sequence[Model],
        store: Store,
        registry: ReplicaRegistry,
        make_replica: Callable[[Model, str, str], Replica],
        *,
        interval: float = 1.0,
    ) -> None:
        self.models = {m.name: m for m in models if m.deploy is not None}
        self.store = store
        self.registry = registry
        self._make_replica = make_replica
        self.interval = interval
        self.routed: dict[str, Replica] = {}
        """Replica id → the replica added to the registry."""
        self._failing = False

    async def sync(self) -> None:
        """Make the registry route exactly the store's ready replicas (StoreUnavailable
        when the store does not answer: nothing changes then)."""
        async with self.store.read() as conn:
            nodes = {n.name: n for n in await rows.list_nodes(conn)}
            replicas = await rows.list_replicas(conn)
        wanted: dict[str, tuple[Model, str]] = {}
        for r in replicas:
            node = nodes.get(r.node)
            model = self.models.get(r.model)
            if model is None or node is None or r.state != ROUTED_STATE:
                continue
            if node.state == "lost":
                continue
            wanted[r.id] = (model, replica_url(node.address, r.port))
        for rid, replica in list(self.routed.items()):
            if rid not in wanted or wanted[rid][1] != replica.url:
                self._remove(rid)
        for rid, (model, url) in sorted(wanted.items()):
            if rid not in self.routed:
                replica = self._make_replica(model, rid, url)
                self.registry.add(replica)
                self.routed[rid] = replica
                log.info("placed replica %s joins routing at %s (from the store)", rid, url)

    def _remove(self, rid: str) -> None:
        replica = self.routed.pop(rid)
        self.registry.remove(replica.model, rid)
        log.info("placed replica %s leaves routing (from the store)", rid)

    def clear(self) -> None:
        """Route none of them (the control plane taking over routes them itself)."""
        for rid in list(self.routed):
            self._remove(rid)

    async def run(self) -> None:
        """Sync every `interval` until cancelled; a store outage is logged once."""
        while True:
            try:
                await self.sync()
            except StoreUnavailable as exc:
                if not self._failing:
                    log.warning("placed replicas not read, routes kept as they are: %s", exc)
                self._failing = True
            except Exception:
                log.exception("placed replicas: a sync failed")
            else:
                self._failing = False
            await asyncio.sleep(self.interval)
