"""The fleet on the admin API: ``GET /admin/placement``, ``/admin/nodes``, ``/admin/replicas``,
``POST /admin/nodes/{name}/cordon|uncordon|drain`` and ``POST /admin/replicas/{id}/restart``.

Present only when the gateway runs the control plane (``control_plane:``). Reading is
for proxy admins and viewers, changing a node or restarting a replica for proxy admins
(403 otherwise); an unknown node or replica is 404. Cordon, uncordon, drain and restart
are written to the store with their audit event, so they survive a restart and reach
the control plane from ``fairgate nodes`` and ``fairgate replicas`` too.

(No ``from __future__ import annotations``: FastAPI reads these annotations at run time.)
"""

from typing import Any, Literal

from fastapi import APIRouter

from fairgate.admin.endpoints.context import Caller
from fairgate.core.errors import Forbidden, NotFound
from fairgate.fleet.controller import FleetController, NodeFlagsError, ReplicaNotFound
from fairgate.tenancy import Actor

__all__ = ["fleet_router"]

_ACTIONS: dict[str, dict[str, bool]] = {
    "cordon": {"cordoned": True},
    "uncordon": {"cordoned": False, "draining": False},
    "drain": {"cordoned": True, "draining": True},
}


def _reader(actor: Actor) -> None:
    if not actor.root_reader:
        raise Forbidden("the fleet is for proxy admins and viewers", code="forbidden")


def fleet_router(controller: FleetController) -> APIRouter:
    router = APIRouter(prefix="/admin", tags=["fleet"])

    @router.get("/placement", summary="Per deployed model: where each replica runs, and why not")
    async def placement(actor: Caller) -> dict[str, Any]:
        _reader(actor)
        return {"data": controller.placement_view()}

    @router.get("/nodes", summary="The fleet's nodes: state, flags, inventory")
    async def nodes(actor: Caller) -> dict[str, Any]:
        _reader(actor)
        return {"data": controller.nodes_view()}

    @router.get("/replicas", summary="Every placed replica: node, port, state, restarts")
    async def replicas(actor: Caller) -> dict[str, Any]:
        _reader(actor)
        return {"data": controller.replicas_view()}

    @router.post("/nodes/{name}/{action}", summary="Cordon, uncordon or drain a node")
    async def flag(
        name: str, action: Literal["cordon", "uncordon", "drain"], actor: Caller
    ) -> dict[str, Any]:
        if not actor.root_admin:
            raise Forbidden("changing a node is for proxy admins", code="forbidden")
        try:
            return await controller.set_flags(
                name, **_ACTIONS[action], actor=actor.name, remote=actor.remote
            )
        except NodeFlagsError:
            raise NotFound(f"no node {name!r} has registered", code="node_not_found") from None

    @router.post(
        "/replicas/{replica_id}/restart",
        summary="Restart a replica: a higher generation, out of crash_loop, relaunched",
    )
    async def restart(replica_id: str, actor: Caller) -> dict[str, Any]:
        if not actor.root_admin:
            raise Forbidden("restarting a replica is for proxy admins", code="forbidden")
        try:
            return await controller.restart(replica_id, actor=actor.name, remote=actor.remote)
        except ReplicaNotFound:
            raise NotFound(
                f"no replica {replica_id!r} is placed", code="replica_not_found"
            ) from None

    return router
