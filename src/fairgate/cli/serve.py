"""``fairgate serve``: load and validate the configuration, then run the gateway."""

from __future__ import annotations

import gc

import typer

from fairgate.cli.options import ConfigOption, load_or_exit

__all__ = ["HELP", "serve"]

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
    from fairgate.auth.jwt import ProviderUnavailable
    from fairgate.config import ConfigError
    from fairgate.observability.logging import configure_logging
    from fairgate.run import WorkersRefused, run
    from fairgate.tenancy import ConfigConflict

    cfg = load_or_exit(config)
    configure_logging(cfg.logging.level, json=cfg.logging.json)
    try:
        status = run(cfg, workers=workers)
    except WorkersRefused as refused:
        typer.echo(f"fairgate serve: {refused}", err=True)
        status = 2
    except ConfigError as error:  # TLS material changed since it was checked; the journal
        for diagnostic in error.diagnostics:
            typer.echo(f"fairgate serve: {diagnostic}", err=True)
        status = 1
    except ConfigConflict as conflict:
        typer.echo(
            f"fairgate serve: the configuration conflicts with the store: {conflict}", err=True
        )
        status = 1
    except ProviderUnavailable as down:
        typer.echo(f"fairgate serve: jwt: {down} (or set jwt.optional_at_start)", err=True)
        status = 1
    # Everything was closed (or never opened): the interpreter's last garbage collections
    # over the whole heap would only delay the exit, by seconds on a loaded host.
    gc.freeze()
    raise typer.Exit(status)
