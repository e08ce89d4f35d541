"""``fairgate demo``: see the gateway work on this machine, no GPU needed."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["HELP", "demo"]

HELP = (
    "Start two simulated vLLM engines and the gateway in front of them on loopback"
    " ports, make a sample call, print how to make your own, and keep running until Ctrl-C."
)


def demo(
    directory: Annotated[
        Path, typer.Option("--dir", help="Where the demo writes its configuration.")
    ] = Path(".demo"),
    once: Annotated[
        bool, typer.Option("--once", help="Exit after the sample call instead of running on.")
    ] = False,
) -> None:
    from fairgate.demo import run_demo

    raise typer.Exit(run_demo(directory, once=once))
