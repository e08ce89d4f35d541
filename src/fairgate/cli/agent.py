"""``fairgate agent``: the node agent's commands.

Today one: ``fairgate agent inventory`` prints what this node has — its GPUs, their
measured memory and compute processes, driver and CUDA versions and the NVLink
domains a tensor-parallel group must fit in — as a table or, with ``--json``, as the
JSON a recorded inventory file holds. The agent that dials the control plane is not
built yet (docs/fleet.md).
"""

from __future__ import annotations

import logging
import sys
from typing import Annotated

import typer

__all__ = ["HELP", "app"]

HELP = "The node agent: what this GPU node has (the agent that joins the fleet is not built yet)."

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)


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
