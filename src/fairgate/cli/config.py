"""``fairgate check-config``: validate a configuration file and the secret files it names."""

from __future__ import annotations

import typer

from fairgate.cli.options import ConfigOption, load_or_exit

__all__ = ["HELP", "check_config"]

HELP = (
    "Validate a configuration file and the secret files it names, without starting anything."
    "\n\n"
    "Prints every problem at once on stderr, one per line as file:line:column: message "
    "(YAML errors, unknown and duplicate keys, wrong types, semantic errors, unreadable "
    "secret files, FAIRGATE_ environment overrides), and exits 1. On success prints a "
    "one-line summary and exits 0. The content of a secret is never printed."
)


def check_config(config: ConfigOption = None) -> None:
    cfg = load_or_exit(config)
    upstreams = sum(len(model.upstreams) for model in cfg.models)
    typer.echo(
        f"ok: {len(cfg.models)} models, {upstreams} upstreams, "
        f"{len(cfg.pools)} pools, {len(cfg.orgs)} orgs"
    )
