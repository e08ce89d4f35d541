"""``fairgate people list|revoke|restore``: callers known by an access token (``jwt:``)."""

from __future__ import annotations

from typing import Annotated

import typer

from fairgate.cli.options import ConfigOption
from fairgate.cli.tenancy import run, show

__all__ = ["HELP", "app"]

HELP = (
    "People who call with their institution's access token: each is one key (jwt-…) "
    "bound to the team the jwt map rules gave. Revoke one to refuse them on every gateway."
)

app = typer.Typer(help=HELP, no_args_is_help=True)

Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
Issuer = Annotated[str, typer.Option("--issuer", help="The token's iss, written whole.")]
Subject = Annotated[str, typer.Option("--subject", help="The token's sub.")]
_COLUMNS = ("key_id", "issuer", "subject", "org", "team", "project", "first_seen", "revoked_at")


@app.command("list")
def list_people(
    revoked: Annotated[bool, typer.Option("--revoked", help="Only the revoked.")] = False,
    issuer: Annotated[str | None, typer.Option("--issuer", help="Only this issuer's.")] = None,
    config: ConfigOption = None,
    as_json: Json = False,
) -> None:
    """List the people seen (and those revoked before they were seen)."""
    people = run(config, lambda t, actor: t.people.list(actor, revoked_only=revoked, issuer=issuer))
    show(people, _COLUMNS, as_json=as_json, title="People")


@app.command("revoke")
def revoke(issuer: Issuer, subject: Subject, config: ConfigOption = None) -> None:
    """Refuse the person from now on, whatever tokens or exchanged keys they hold: every
    gateway on this store applies it within auth.change_poll_interval."""
    key_id = run(config, lambda t, actor: t.people.revoke(actor, issuer=issuer, subject=subject))
    typer.echo(f"revoked {subject} of {issuer} (key {key_id})")


@app.command("restore")
def restore(issuer: Issuer, subject: Subject, config: ConfigOption = None) -> None:
    """Lift the person's revocation."""
    key_id = run(config, lambda t, actor: t.people.restore(actor, issuer=issuer, subject=subject))
    typer.echo(f"restored {subject} of {issuer} (key {key_id})")
