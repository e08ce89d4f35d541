"""``fairgate nodes list|cordon|uncordon|drain`` and ``fairgate replicas list|restart``: the fleet.

They read and write the store the configuration names, as the control plane last wrote
it (states, replicas) — the gateway need not be running. Cordon, uncordon and drain
are persisted flags, and a restart a persisted generation: the control plane reads them
within a second (it re-reads them on every tick), and they survive its restarts. Each
change is audited as the operator (``operator:<login name>``). ``GET /admin/nodes`` and
``/admin/replicas`` show the same with what only the running control plane knows
(whether the agent is connected, how long it has been silent, routing).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from fairgate.cli.options import ConfigOption, fail
from fairgate.cli.tenancy import run, show

__all__ = ["NODES_HELP", "REPLICAS_HELP", "nodes_app", "replicas_app"]

NODES_HELP = (
    "The fleet's nodes (agents that registered with the control plane): list them, "
    "cordon (no new replicas), drain (cordon and move its replicas away), uncordon."
)
REPLICAS_HELP = (
    "The replicas the control plane placed on the fleet's nodes: list them, restart one "
    "(the way out of crash_loop)."
)

nodes_app = typer.Typer(help=NODES_HELP, no_args_is_help=True)
replicas_app = typer.Typer(help=REPLICAS_HELP, no_args_is_help=True)

Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
Node = Annotated[str, typer.Argument(help="The node's name (its certificate's DNS SAN).")]

_NODE_COLUMNS = (
    "name",
    "state",
    "cordoned",
    "draining",
    "address",
    "labels",
    "last_heartbeat_at",
    "desired_version",
)
_REPLICA_COLUMNS = (
    "id",
    "model",
    "node",
    "gpus",
    "port",
    "state",
    "generation",
    "restarts",
    "pid",
    "detail",
)


@nodes_app.command("list")
def list_nodes(config: ConfigOption = None, as_json: Json = False) -> None:
    """List the nodes with their state (healthy, unreachable, lost) and flags."""
    from fairgate.store import fleet

    async def work(t: Any, _: Any) -> list[Any]:
        async with t.store.read() as conn:
            return await fleet.list_nodes(conn)

    show(run(config, work), _NODE_COLUMNS, as_json=as_json, title="Nodes")


def _flag(config: Any, name: str, cordoned: bool, draining: bool | None, what: str) -> None:
    from fairgate.store import fleet

    async def work(t: Any, actor: Any) -> Any:
        async with t.store.write() as conn:
            return await fleet.set_flags(
                conn,
                name,
                cordoned=cordoned,
                draining=draining,
                actor=actor.name,
                now=datetime.now(UTC),
            )

    if run(config, work) is None:
        raise fail(f"no node {name!r} has registered")
    typer.echo(f"node {name} {what}")


@nodes_app.command("cordon")
def cordon(node: Node, config: ConfigOption = None) -> None:
    """No new replica goes to the node; those it runs stay."""
    _flag(config, node, True, None, "cordoned: it takes no new replicas")


@nodes_app.command("uncordon")
def uncordon(node: Node, config: ConfigOption = None) -> None:
    """The node takes new replicas again (ends a cordon or a drain)."""
    _flag(config, node, False, False, "takes new replicas again")


@nodes_app.command("drain")
def drain(node: Node, config: ConfigOption = None) -> None:
    """Cordon the node and move its replicas: each is replaced on another node and, once
    the replacement is ready (or after control_plane.replacement_deadline), leaves
    routing and is stopped by its agent when its requests in flight finish. While no
    node fits a replacement it keeps serving (GET /admin/placement says why)."""
    _flag(config, node, True, True, "drains: its replicas are replaced on other nodes first")


@replicas_app.command("list")
def list_replicas(
    model: Annotated[str | None, typer.Option("--model", help="Only this model's.")] = None,
    config: ConfigOption = None,
    as_json: Json = False,
) -> None:
    """List the placed replicas: node, GPUs, port, state as last reported, restarts."""
    from fairgate.store import fleet

    async def work(t: Any, _: Any) -> list[Any]:
        async with t.store.read() as conn:
            return await fleet.list_replicas(conn, model=model)

    show(run(config, work), _REPLICA_COLUMNS, as_json=as_json, title="Replicas")


@replicas_app.command("restart")
def restart(
    replica: Annotated[str, typer.Argument(help="The replica's id (fairgate replicas list).")],
    config: ConfigOption = None,
    as_json: Json = False,
) -> None:
    """Restart a replica: its generation is raised and its failures cleared, so its agent
    stops what runs (a crash loop included) and launches it afresh with a fresh restart
    count. The way out of crash_loop once its cause is fixed."""
    from fairgate.store import fleet

    async def work(t: Any, actor: Any) -> Any:
        async with t.store.write() as conn:
            return await fleet.restart_replica(
                conn, replica, now=datetime.now(UTC), actor=actor.name
            )

    row = run(config, work)
    if row is None:
        raise fail(f"no replica {replica!r} is placed")
    show([row], _REPLICA_COLUMNS, as_json=as_json, title="Replica restarted")
