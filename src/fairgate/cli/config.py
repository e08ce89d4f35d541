"""``fairgate check-config``: validate a configuration file and the secret files it names."""

from __future__ import annotations

from datetime import UTC, datetime

import typer

from fairgate.cli.options import ConfigOption, load_or_exit

__all__ = ["HELP", "check_config"]

HELP = (
    "Validate a configuration file and the secret files it names, without starting anything."
    "\n\n"
    "Prints every problem at once on stderr, one per line as file:line:column: message "
    "(YAML errors, unknown and duplicate keys, wrong types, semantic errors, unreadable "
    "secret files, FAIRGATE_ environment overrides), and exits 1. Every vault: secret is "
    "read from the vault (a token or AppRole login is used) unless --skip-vault is given; "
    "one that cannot be read is named with the reason. On success prints a "
    "one-line summary and exits 0; warnings (an expired TLS certificate) go to stderr "
    "and do not fail the check. The content of a secret is never printed."
)


def check_config(
    config: ConfigOption = None,
    skip_vault: bool = typer.Option(
        False,
        "--skip-vault",
        help=(
            "Do not read the vault: vault references are checked for form only, and TLS"
            " material held in the vault is not checked."
        ),
    ),
) -> None:
    from fairgate.config.tls import tls_report
    from fairgate.vault import vault_references

    cfg = load_or_exit(config, read_vault=not skip_vault)
    listeners = {"listen": cfg.listen.tls, "admin_listen": cfg.admin_listen.tls}
    if skip_vault:  # TLS material held in the vault is not read, so not checked either
        listeners = {
            where: tls
            for where, tls in listeners.items()
            if tls is None or not vault_references(tls)
        }
    errors, warnings = tls_report(listeners, datetime.now(UTC))
    for warning in warnings:
        typer.echo(f"warning: {warning}", err=True)
    if errors:  # TLS material held in the vault, read after the file's checks
        for diagnostic in errors:
            typer.echo(f"{cfg.path}: {diagnostic.message}", err=True)
        raise typer.Exit(1)
    upstreams = sum(len(model.upstreams) for model in cfg.models)
    vault = len({ref.vault for ref in vault_references(cfg)})
    read = "not read" if skip_vault else "read"
    typer.echo(
        f"ok: {len(cfg.models)} models, {upstreams} upstreams, "
        f"{len(cfg.pools)} pools, {len(cfg.orgs)} orgs"
        + (f", {vault} vault secrets {read}" if vault else "")
    )
