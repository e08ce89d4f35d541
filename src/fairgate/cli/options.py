"""Options and helpers every command shares: ``-c FILE`` (default ``$FAIRGATE_CONFIG``)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:  # imported when a configuration is loaded: `fairgate sim` needs none
    from fairgate.config import Config

__all__ = ["ConfigOption", "fail", "load_or_exit"]

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "-c",
        "--config",
        envvar="FAIRGATE_CONFIG",
        show_envvar=True,
        help="The configuration file (YAML).",
        dir_okay=False,
    ),
]


def fail(reason: str) -> typer.Exit:
    """Print a one-line reason to stderr; return the Exit(1) to raise."""
    typer.echo(f"fairgate: {reason}", err=True)
    return typer.Exit(1)


def load_or_exit(path: Path | None, *, read_vault: bool = True) -> Config:
    """The validated configuration, or every diagnostic on stderr and exit status 1.

    Its ``vault:`` secrets are read too (``read_vault``), so every command has them;
    one that cannot be read is named on stderr with the reason, and the exit status is 1.
    """
    from fairgate.config import ConfigError, load_config

    if path is None:
        raise fail("no configuration file: pass -c FILE or set FAIRGATE_CONFIG")
    try:
        config = load_config(path, env=os.environ)
    except ConfigError as error:
        for diagnostic in error.diagnostics:
            typer.echo(str(diagnostic), err=True)
        raise typer.Exit(1) from None
    if read_vault:
        from fairgate.vault import SecretsUnreadable, read_vault_secrets

        try:
            asyncio.run(read_vault_secrets(config))
        except SecretsUnreadable as error:
            for reference, reason in error.problems:
                typer.echo(f"{config.path}: {reference}: cannot be read: {reason}", err=True)
            raise typer.Exit(1) from None
    return config
