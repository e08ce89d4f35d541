"""``fairgate serve``: load and validate the configuration, then run the gateway."""

from __future__ import annotations

import typer

from fairgate.cli.options import ConfigOption, load_or_exit

__all__ = ["HELP", "serve"]

HELP = """Run the gateway: the client listener (OpenAI API) and the admin listener
(/healthz, /readyz, /metrics).

Stops on SIGTERM or SIGINT: readiness flips to 503 at once, new connections are
refused, running requests and streams get proxy.shutdown_grace to finish.
"""


def serve(
    config: ConfigOption = None,
    workers: int = typer.Option(
        1,
        "--workers",
        min=1,
        max=64,
        help="Processes sharing the listening sockets. Each worker keeps its own in-memory "
        "state (replica health, in-flight counts, metrics), so N>1 is for stateless "
        "pass-through only; see docs/operations.md.",
    ),
) -> None:
    from fairgate.app import run
    from fairgate.observability.logging import configure_logging

    cfg = load_or_exit(config)
    configure_logging(cfg.logging.level, json=cfg.logging.json)
    raise typer.Exit(run(cfg, workers=workers))
