"""``fairgate users create|list|disable|enable|grant|revoke-role|roles``; ``admin-tokens``."""

from __future__ import annotations

from typing import Annotated

import typer

from fairgate.cli.options import ConfigOption, fail
from fairgate.cli.tenancy import run, show

__all__ = ["HELP", "TOKENS_HELP", "app", "tokens_app"]

HELP = "Users of the admin API and their roles (proxy_admin … viewer; see docs/tenancy.md)."
TOKENS_HELP = "Admin tokens (fga-…) for the admin API: stored hashed, printed once."

app = typer.Typer(help=HELP, no_args_is_help=True)
tokens_app = typer.Typer(help=TOKENS_HELP, no_args_is_help=True)

Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
Org = Annotated[str | None, typer.Option("--org", help="An organisation scope.")]
Team = Annotated[str | None, typer.Option("--team", help="A team scope.")]
_USER_COLUMNS = ("name", "org", "created_at", "disabled_at")
_ROLE_COLUMNS = ("user", "role", "scope_kind", "scope", "created_by")
_TOKEN_COLUMNS = ("id", "prefix", "user", "name", "created_at", "expires_at", "revoked_at")


@app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="The user's name (letters, digits, _ . - @ +).")],
    org: Org = None,
    config: ConfigOption = None,
    as_json: Json = False,
) -> None:
    """Create a user (with no role until one is granted)."""
    user = run(config, lambda t, actor: t.users.create(actor, name, org=org))
    show([user], _USER_COLUMNS, as_json=as_json, title="user created")


@app.command("list")
def list_users(config: ConfigOption = None, as_json: Json = False) -> None:
    """List users."""
    users = run(config, lambda t, actor: t.users.list(actor))
    show(users, _USER_COLUMNS, as_json=as_json, title="users")


@app.command("disable")
def disable(
    name: Annotated[str, typer.Argument(help="The user.")],
    config: ConfigOption = None,
    as_json: Json = False,
) -> None:
    """Disable a user: their admin tokens are revoked at once."""
    user = run(config, lambda t, actor: t.users.disable(actor, name))
    show([user], _USER_COLUMNS, as_json=as_json, title="user disabled")


@app.command("enable")
def enable(
    name: Annotated[str, typer.Argument(help="The user.")],
    config: ConfigOption = None,
    as_json: Json = False,
) -> None:
    """Enable a disabled user; tokens revoked when it was disabled stay revoked."""
    user = run(config, lambda t, actor: t.users.enable(actor, name))
    show([user], _USER_COLUMNS, as_json=as_json, title="user enabled")


@app.command("grant")
def grant(
    name: Annotated[str, typer.Argument(help="The user.")],
    role: Annotated[str, typer.Argument(help="proxy_admin, proxy_viewer, org_admin, …")],
    org: Org = None,
    team: Team = None,
    config: ConfigOption = None,
    as_json: Json = False,
) -> None:
    """Grant a role: on the root (no scope), an organisation (--org) or a team (--team)."""
    binding = run(
        config, lambda t, actor: t.roles.grant(actor, user=name, role=role, org=org, team=team)
    )
    show([binding], _ROLE_COLUMNS, as_json=as_json, title="role granted")


@app.command("revoke-role")
def revoke_role(
    name: Annotated[str, typer.Argument(help="The user.")],
    role: Annotated[str, typer.Argument(help="The role to remove.")],
    org: Org = None,
    team: Team = None,
    config: ConfigOption = None,
) -> None:
    """Remove a role binding (it applies to the user's next admin request)."""
    run(config, lambda t, actor: t.roles.revoke(actor, user=name, role=role, org=org, team=team))
    typer.echo(f"removed {role} from {name}")


@app.command("roles")
def roles(
    name: Annotated[str | None, typer.Argument(help="Only this user.")] = None,
    config: ConfigOption = None,
    as_json: Json = False,
) -> None:
    """List role bindings."""
    bindings = run(config, lambda t, actor: t.roles.list(actor, user=name))
    show(bindings, _ROLE_COLUMNS, as_json=as_json, title="role bindings")


@tokens_app.command("create")
def create_token(
    user: Annotated[str, typer.Option("--user", help="The token's user.")],
    name: Annotated[str | None, typer.Option("--name", help="A label for listings.")] = None,
    expires: Annotated[str | None, typer.Option("--expires", help="Lifetime: 90d.")] = None,
    config: ConfigOption = None,
    as_json: Json = False,
) -> None:
    """Create an admin token for a user and print it, once."""
    from fairgate.core.durations import parse_duration

    try:
        lifetime = None if expires is None else parse_duration(expires)
    except ValueError as error:
        raise fail(f"--expires: {error}") from None
    new = run(
        config,
        lambda t, actor: t.admin_tokens.create(actor, user=user, name=name, expires_in=lifetime),
    )
    show([new] if as_json else [new.token], _TOKEN_COLUMNS, as_json=as_json, title="token created")
    if not as_json:
        typer.echo(f"secret: {new.secret}")
        typer.echo("(shown once: store it now)")


@tokens_app.command("list")
def list_tokens(config: ConfigOption = None, as_json: Json = False) -> None:
    """List admin tokens (never their secrets)."""
    tokens = run(config, lambda t, actor: t.admin_tokens.list(actor))
    show(tokens, _TOKEN_COLUMNS, as_json=as_json, title="admin tokens")


@tokens_app.command("revoke")
def revoke_token(
    token_id: Annotated[str, typer.Argument(help="The token's id.")],
    config: ConfigOption = None,
) -> None:
    """Revoke an admin token at once."""
    run(config, lambda t, actor: t.admin_tokens.revoke(actor, token_id))
    typer.echo(f"revoked {token_id}")
