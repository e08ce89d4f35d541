"""``fairgate serve``: load and validate the configuration, then run the gateway;
``fairgate control-plane``: the same, with only the fleet's control plane and the admin
listener."""

from __future__ import annotations

import gc
from collections.abc import Callable

import typer

from fairgate.cli.options import ConfigOption, load_or_exit

__all__ = ["CONTROL_PLANE_HELP", "HELP", "control_plane", "serve"]

HELP = (
    "Run the gateway: the client listener (OpenAI API) and the admin listener"
    " (/healthz, /readyz, /metrics)."
    "\n\n"
    "Stops on SIGTERM or SIGINT: readiness flips to 503 at once, new connections are"
    " refused, running requests and streams get proxy.shutdown_grace to finish."
    "\n\n"
    "SIGHUP re-reads the listeners' TLS certificates, keys and client CAs: new"
    " connections get the new ones, open connections continue; a reference that does"
    " not load keeps the previous certificate and logs an error (docs/tls.md)."
    "\n\n"
    "Exits with status 1, changing nothing, when the configuration declares a team the"
    " store holds under another organisation and the team was not created by the"
    ' configuration (see docs/tenancy.md, "Declared team names"), and, before opening'
    " anything, when the usage-record journal's directory (accounting.journal_path) cannot"
    " be created or written."
)


CONTROL_PLANE_HELP = (
    "Run the fleet's control plane without the OpenAI API: the agents' gRPC listener"
    " (control_plane.listen, mutual TLS), placement of the deploy: models' replicas, the"
    " nodes and replicas in the store, and the admin listener (admin_listen: the admin API"
    " of fairgate serve, with /admin/placement, /admin/nodes, /admin/replicas, the nodes'"
    " cordon/uncordon/drain, a replica's restart, /healthz, /readyz, /metrics); the client"
    " listener (listen) is not opened. The configuration file is the one of fairgate serve"
    " and needs a control_plane: section (exit status 2 without)."
    "\n\n"
    "Of the control planes on one store only the holder of the store's lease places and"
    " commands the agents; another is a standby that refuses the agents' streams and takes"
    " over once the holder's lease (control_plane.lease_ttl) has expired. Give the agents"
    " every control plane's address (fairgate agent --control-plane A:P,B:P). Gateways"
    " (fairgate serve without control_plane:) on the same store route to the replicas it"
    " placed (docs/fleet.md)."
    "\n\n"
    "Prints 'fairgate control-plane listening on admin URL agents HOST:PORT' once both"
    " listen. Stops on SIGTERM or SIGINT, giving the lease up so a standby takes over at"
    " once; the engines keep serving."
)


def control_plane(config: ConfigOption = None) -> None:
    from fairgate.observability.logging import configure_logging
    from fairgate.run import run_control_plane

    cfg = load_or_exit(config)
    if cfg.control_plane is None:
        typer.echo(
            "fairgate control-plane: the configuration has no control_plane: section "
            "(where the agents dial in, its TLS); see docs/fleet.md",
            err=True,
        )
        raise typer.Exit(2)
    configure_logging(cfg.logging.level, json=cfg.logging.json)
    _exit(lambda: run_control_plane(cfg), "fairgate control-plane")


def serve(
    config: ConfigOption = None,
    workers: int = typer.Option(
        1,
        "--workers",
        min=1,
        max=64,
        help="Processes sharing the listening sockets. N>1 needs state.backend: redis "
        "(limits, budgets and fair share are shared there; it is refused with memory). "
        "Replica health, in-flight counts and metrics stay per worker; see "
        "docs/operations.md.",
    ),
) -> None:
    from fairgate.observability.logging import configure_logging
    from fairgate.run import run

    cfg = load_or_exit(config)
    configure_logging(cfg.logging.level, json=cfg.logging.json)
    _exit(lambda: run(cfg, workers=workers), "fairgate serve")


def _exit(main: Callable[[], int], name: str) -> None:
    """Run `main` and exit with its status, or with the status and message of each
    refusal a gateway's start can end in."""
    from fairgate.auth.jwt import ProviderUnavailable
    from fairgate.config import ConfigError
    from fairgate.run import WorkersRefused
    from fairgate.tenancy import ConfigConflict

    try:
        status = main()
    except WorkersRefused as refused:
        typer.echo(f"{name}: {refused}", err=True)
        status = 2
    except ConfigError as error:  # TLS material changed since it was checked; the journal
        for diagnostic in error.diagnostics:
            typer.echo(f"{name}: {diagnostic}", err=True)
        status = 1
    except ConfigConflict as conflict:
        typer.echo(f"{name}: the configuration conflicts with the store: {conflict}", err=True)
        status = 1
    except ProviderUnavailable as down:
        typer.echo(f"{name}: jwt: {down} (or set jwt.optional_at_start)", err=True)
        status = 1
    # Everything was closed (or never opened): the interpreter's last garbage collections
    # over the whole heap would only delay the exit, by seconds on a loaded host.
    gc.freeze()
    raise typer.Exit(status)
