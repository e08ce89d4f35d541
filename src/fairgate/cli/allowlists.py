"""``fairgate allowlists list|set|clear``: IP allowlists of organisations, teams and keys."""

from __future__ import annotations

from typing import Annotated

import typer

from fairgate.cli.options import ConfigOption, fail
from fairgate.cli.tenancy import run, show

__all__ = ["HELP", "app"]

HELP = (
    "IP allowlists: a key's requests must come from an address in every list that applies "
    "(its organisation's, its team's, its own), or they are refused with 403."
)

app = typer.Typer(help=HELP, no_args_is_help=True)

Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
Scope = Annotated[str, typer.Option("--scope", help="Whose list: org:NAME, team:NAME or key:ID.")]
_COLUMNS = ("kind", "name", "org", "team", "cidrs", "updated_at", "updated_by")
_KINDS = ("org", "team", "key")


def _scope(text: str) -> tuple[str, str]:
    kind, _, name = text.partition(":")
    if kind not in _KINDS or not name:
        raise fail(f"--scope {text!r}: write org:NAME, team:NAME or key:ID")
    return kind, name


@app.command("list")
def list_allowlists(
    scope: Annotated[
        str | None, typer.Option("--scope", help="Only this list: org:NAME, team:NAME, key:ID.")
    ] = None,
    config: ConfigOption = None,
    as_json: Json = False,
) -> None:
    """List the IP allowlists (a scope with no list has no row: any address may use it)."""
    wanted = None if scope is None else _scope(scope)
    lists = run(config, lambda t, actor: t.allowlists.list(actor))
    if wanted is not None:
        lists = [a for a in lists if (a.kind, a.name) == wanted]
    show(lists, _COLUMNS, as_json=as_json, title="IP allowlists")


@app.command("set")
def set_allowlist(
    scope: Scope,
    cidrs: Annotated[
        list[str] | None,
        typer.Option("--cidr", help="A network (10.0.0.0/8, 2001:db8::/32) or an address; repeat."),
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Replace a list with the --cidr networks; every gateway on this store applies it
    within auth.change_poll_interval. A network with bits beyond its prefix, an IPv4-mapped
    one, or more than 256 networks are refused."""
    kind, name = _scope(scope)
    if not cidrs:
        raise fail("give at least one --cidr (`fairgate allowlists clear` removes a list)")
    stored = run(config, lambda t, actor: t.allowlists.set(actor, kind, name, cidrs))
    typer.echo(f"{kind}:{name} allows {', '.join(stored)}")


@app.command("clear")
def clear_allowlist(scope: Scope, config: ConfigOption = None) -> None:
    """Remove a list: any address may then use the scope (other lists that apply still do)."""
    kind, name = _scope(scope)
    run(config, lambda t, actor: t.allowlists.set(actor, kind, name, []))
    typer.echo(f"{kind}:{name} has no IP allowlist")
