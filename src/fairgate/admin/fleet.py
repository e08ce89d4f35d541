"""The fleet on the admin API: ``GET /admin/placement``, ``/admin/nodes``, ``/admin/replicas``
and ``POST /admin/nodes/{name}/cordon|uncordon|drain``.

Present only when the gateway runs the control plane (``control_plane:``). Reading is
for proxy admins and viewers, changing a node for proxy admins (403 otherwise);
an unknown node is 404. Cordon, uncordon and drain are written to the store, so they
survive a restart and reach the control plane from ``fairgate nodes`` too.

(No ``from __future__ import annotations``: FastAPI reads these annotations at run time.)
"""

from typing import Any, Literal

from fastapi import APIRouter

from fairgate.admin.endpoints.context import Caller
from fairgate.core.errors import Forbidden, NotFound
from fairgate.fleet.controller import FleetController, NodeFlagsError
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
            return await controller.set_flags(name, **_ACTIONS[action])
        except NodeFlagsError:
            raise NotFound(f"no node {name!r} has registered", code="node_not_found") from None

    return router
