"""``fairgate agent``: the node agent's commands.

``fairgate agent --control-plane HOST:PORT --cert F --key F --ca F --node-name N``
dials the control plane over mutual TLS and runs the replicas its desired state
names (docs/fleet.md); SIGTERM or SIGINT stops it at once and leaves its engines
serving (``--stop-engines`` drains and stops them too); a restarted agent with the
same ``--state-dir`` adopts them. ``--slurm`` takes the node's GPUs and the
allocation's end time from the Slurm job's environment.
``fairgate agent inventory`` prints what this node has — its GPUs, their measured
memory and compute processes, driver and CUDA versions and the NVLink domains a
tensor-parallel group must fit in — as a table or, with ``--json``, as the JSON a
recorded inventory file (``--inventory``) holds.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

__all__ = ["HELP", "app"]

HELP = "The node agent: join the control plane and run its replicas, or print the inventory."

app = typer.Typer(invoke_without_command=True, add_completion=False, pretty_exceptions_enable=False)


def _labels(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{item!r} is not k=v", param_hint="--labels")
        out[key] = value
    return out


@app.callback()
def agent(
    ctx: typer.Context,
    control_plane: Annotated[
        str | None,
        typer.Option(
            "--control-plane",
            help="The control plane, HOST:PORT, or several comma-separated (an active one "
            "and its standbys): each failed or refused stream dials the next.",
        ),
    ] = None,
    cert: Annotated[
        Path | None, typer.Option("--cert", help="This node's certificate (PEM).")
    ] = None,
    key: Annotated[Path | None, typer.Option("--key", help="Its private key (PEM).")] = None,
    ca: Annotated[
        Path | None,
        typer.Option("--ca", help="The CA that issued the control plane's certificate."),
    ] = None,
    node_name: Annotated[
        str | None,
        typer.Option("--node-name", help="This node's name: its certificate's DNS SAN (or CN)."),
    ] = None,
    labels: Annotated[str, typer.Option("--labels", help="Node labels, k=v,k=v.")] = "",
    inventory_file: Annotated[
        Path | None,
        typer.Option("--inventory", help="A recorded inventory (JSON) instead of probing."),
    ] = None,
    server_name: Annotated[
        str | None,
        typer.Option(
            "--server-name",
            help="The name to check on the control plane's certificate (default: HOST).",
        ),
    ] = None,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            "--state-dir",
            help="Where the agent records the engines it launched, to adopt them after a "
            "restart (default: /var/lib/fairgate/agent/NODE as root, else "
            "$XDG_STATE_HOME/fairgate/agent/NODE).",
        ),
    ] = None,
    stop_engines: Annotated[
        bool,
        typer.Option(
            "--stop-engines",
            help="On SIGTERM/SIGINT, drain and stop the engines too (default: they keep "
            "serving, for the next agent to adopt).",
        ),
    ] = False,
    slurm: Annotated[
        bool,
        typer.Option(
            "--slurm",
            help="Run inside a Slurm allocation: only its GPUs (CUDA_VISIBLE_DEVICES, "
            "SLURM_JOB_GPUS), its end time reported (SLURM_JOB_END_TIME).",
        ),
    ] = False,
) -> None:
    if ctx.invoked_subcommand is not None:
        return
    missing = [
        flag
        for flag, value in (
            ("--control-plane", control_plane),
            ("--cert", cert),
            ("--key", key),
            ("--ca", ca),
            ("--node-name", node_name),
        )
        if not value
    ]
    if missing:
        typer.echo(ctx.get_help())
        typer.echo(f"fairgate: agent needs {', '.join(missing)}", err=True)
        raise typer.Exit(2)
    assert control_plane and cert and key and ca and node_name
    _run_agent(
        control_plane,
        cert,
        key,
        ca,
        node_name,
        _labels(labels),
        inventory_file,
        server_name,
        state_dir=state_dir,
        stop_engines=stop_engines,
        slurm=slurm,
    )


def _run_agent(
    target: str,
    cert: Path,
    key: Path,
    ca: Path,
    node_name: str,
    labels: dict[str, str],
    inventory_file: Path | None,
    server_name: str | None,
    *,
    state_dir: Path | None,
    stop_engines: bool,
    slurm: bool,
) -> None:
    import asyncio
    import os
    import signal

    import grpc

    from fairgate.fleet.agent import Agent
    from fairgate.fleet.slurm import Allocation, SlurmError
    from fairgate.fleet.state import StateDir, StateDirBusy, default_state_dir
    from fairgate.inventory import Inventory, probe

    logging.basicConfig(level=logging.INFO, format="fairgate agent: %(levelname)s: %(message)s")
    allocation = None
    if slurm:
        try:
            allocation = Allocation.from_env(os.environ)
        except SlurmError as exc:
            typer.echo(f"fairgate: {exc}", err=True)
            raise typer.Exit(2) from None
        labels = {"slurm_job": allocation.job_id, **labels}
        if not allocation.ends_at:
            logging.getLogger("fairgate.fleet").warning(
                "Slurm job %s: no end time in the environment (SLURM_JOB_END_TIME, or "
                "SLURM_JOB_START_TIME with SBATCH_TIMELIMIT); reporting none",
                allocation.job_id,
            )
    state = StateDir(state_dir or default_state_dir(node_name))
    try:
        state.lock()
    except (StateDirBusy, OSError) as exc:
        typer.echo(f"fairgate: {exc}", err=True)
        raise typer.Exit(1) from None
    try:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=ca.read_bytes(),
            private_key=key.read_bytes(),
            certificate_chain=cert.read_bytes(),
        )
        recorded = Inventory.from_json(inventory_file.read_text()) if inventory_file else None
    except (OSError, ValueError) as exc:
        typer.echo(f"fairgate: {exc}", err=True)
        raise typer.Exit(1) from None

    def current() -> Inventory:
        found = recorded if recorded is not None else probe()
        return allocation.restrict(found) if allocation is not None else found

    options = [("grpc.ssl_target_name_override", server_name)] if server_name else []
    targets = [t.strip() for t in target.split(",") if t.strip()]
    if not targets:
        typer.echo("fairgate: --control-plane names no HOST:PORT", err=True)
        raise typer.Exit(2)
    node = Agent(
        target=targets,
        credentials=credentials,
        node_name=node_name,
        inventory=current,
        labels=labels,
        channel_options=options,
        state_dir=state,
        allocation_ends_at=allocation.ends_at if allocation is not None else 0,
        device_ids=allocation.devices if allocation is not None else None,
    )

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stopping = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping.set)
        running = asyncio.create_task(node.run())
        await stopping.wait()
        await node.stop(stop_engines=stop_engines)
        await running

    asyncio.run(main())


@app.command(
    "inventory",
    help="Print this node's GPUs (NVML, else nvidia-smi): index, model, memory, processes, "
    "NVLink domain; driver and CUDA versions.",
)
def inventory(
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the inventory as JSON (a recorded inventory).")
    ] = False,
) -> None:
    from fairgate.inventory import probe
    from fairgate.inventory.probe import ProbeError

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("fairgate: %(levelname)s: %(message)s"))
    logging.getLogger("fairgate.inventory").addHandler(handler)
    logging.getLogger("fairgate.inventory").setLevel(logging.WARNING)
    try:
        found = probe()
    except ProbeError as exc:
        typer.echo(f"fairgate: {exc}", err=True)
        raise typer.Exit(1) from None
    if as_json:
        typer.echo(found.to_json())
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not found.gpus:
        console.print(f"no NVIDIA GPU found (source: {found.source})")
        return
    table = Table(
        title=f"driver {found.driver_version or '?'}, CUDA {found.cuda_version or '?'} "
        f"(from {found.source})"
    )
    for column in ("GPU", "model", "memory used / total MiB", "processes", "NVLink domain", "UUID"):
        table.add_column(column)
    for gpu in found.gpus:
        table.add_row(
            str(gpu.index),
            gpu.name,
            f"{gpu.memory_used_mib} / {gpu.memory_total_mib}",
            str(gpu.processes),
            str(gpu.nvlink_domain),
            gpu.uuid,
        )
    console.print(table)
    domains = found.domains()
    console.print(
        "NVLink domains: "
        + "; ".join(
            f"{d}: GPUs {', '.join(str(g.index) for g in gpus)}" for d, gpus in domains.items()
        )
    )
