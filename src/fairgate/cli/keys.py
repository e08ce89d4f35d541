"""``fairgate keys create|list|revoke|rotate``: virtual keys, the secret printed once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from fairgate.cli.options import ConfigOption, fail
from fairgate.cli.tenancy import csv, key_limits, run, show

__all__ = ["HELP", "app"]

HELP = (
    "Virtual keys (fg-…): stored hashed only; the secret is printed once, at creation, "
    "or handed over by a one-time claim link (--claim)."
)

app = typer.Typer(help=HELP, no_args_is_help=True)

Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
Limit = Annotated[
    int | None, typer.Option(min=1, help="Narrows the team's per-key limit (never above it).")
]
_COLUMNS = (
    "id",
    "prefix",
    "name",
    "team",
    "project",
    "owner",
    "models",
    "rpm",
    "tpm",
    "created_at",
    "expires_at",
    "revoked_at",
)


def _duration(option: str, text: str | None) -> float | None:
    from fairgate.core.durations import parse_duration

    if text is None:
        return None
    try:
        return parse_duration(text)
    except ValueError as error:
        raise fail(f"{option}: {error}") from None


def _secret(secret: str, key_id: str, as_json: bool) -> None:
    if as_json:
        return
    typer.echo(f"secret: {secret}")
    typer.echo(
        f"(shown once: store it now; `fairgate keys list` shows only {key_id} and its prefix)"
    )


@app.command("create")
def create(
    team: Annotated[str, typer.Option("--team", help="The key's team.")],
    project: Annotated[str | None, typer.Option("--project", help="A project of the team.")] = None,
    name: Annotated[str | None, typer.Option("--name", help="A label for listings.")] = None,
    models: Annotated[
        str | None, typer.Option("--models", help="Allowed models, a,b ('' = none).")
    ] = None,
    tags: Annotated[
        str | None,
        typer.Option("--tags", help="Tags for budgets, a,b (set by team admins and above)."),
    ] = None,
    rpm: Limit = None,
    tpm: Limit = None,
    rpd: Limit = None,
    max_inflight: Limit = None,
    expires: Annotated[
        str | None,
        typer.Option(
            "--expires",
            help="Lifetime from now: 30d, 12h. With --claim: the link's lifetime "
            "(default 72h, at most 30d).",
        ),
    ] = None,
    claim: Annotated[
        bool,
        typer.Option(
            "--claim",
            help="Print a one-time claim link ({public_url}/claim/…) instead of the secret; "
            "needs public_url in the configuration.",
        ),
    ] = False,
    key_expires: Annotated[
        str | None,
        typer.Option("--key-expires", help="With --claim: the key's own lifetime (30d, 12h)."),
    ] = None,
    config: ConfigOption = None,
    as_json: Json = False,
) -> None:
    """Create a key and print its secret, once; or, with --claim, a link that reveals it once."""
    if key_expires is not None and not claim:
        raise fail("--key-expires goes with --claim; without it --expires is the key's lifetime")
    limits = key_limits(rpm, tpm, rpd, max_inflight)
    fields: dict[str, Any] = {
        "project": project,
        "name": name,
        "models": csv(models),
        "tags": csv(tags) or (),
        "limits": limits,
    }
    if claim:
        _create_claim(team, fields, expires, key_expires, config, as_json)
        return
    lifetime = _duration("--expires", expires)
    new = run(
        config, lambda t, actor: t.keys.create(actor, team=team, expires_in=lifetime, **fields)
    )
    show([new] if as_json else [new.key], _COLUMNS, as_json=as_json, title="key created")
    _secret(new.secret, new.key.id, as_json)


def _create_claim(
    team: str,
    fields: dict[str, Any],
    expires: str | None,
    key_expires: str | None,
    config: Path | None,
    as_json: bool,
) -> None:
    """``keys create --claim``: the key and its link; the link printed, never the secret."""
    from fairgate.tenancy.claims import DEFAULT_CLAIM_LIFETIME

    link_lifetime = _duration("--expires", expires) or DEFAULT_CLAIM_LIFETIME
    key_lifetime = _duration("--key-expires", key_expires)
    made = run(
        config,
        lambda t, actor: t.claims.create(
            actor, team=team, expires_in=link_lifetime, key_expires_in=key_lifetime, **fields
        ),
    )
    show([made] if as_json else [made.key], _COLUMNS, as_json=as_json, title="key created")
    if as_json:
        return
    typer.echo(f"claim link: {made.url}")
    typer.echo(
        f"(opens once, until {made.expires_at:%Y-%m-%d %H:%M} UTC: send it to the key's holder; "
        "the secret is shown only to whoever opens it first)"
    )


@app.command("list")
def list_keys(
    team: Annotated[str | None, typer.Option("--team", help="Only this team.")] = None,
    live: Annotated[bool, typer.Option("--live", help="Leave out revoked keys.")] = False,
    config: ConfigOption = None,
    as_json: Json = False,
) -> None:
    """List keys (never their secrets)."""
    keys = run(
        config,
        lambda t, actor: t.keys.list(actor, team=team, include_revoked=not live, limit=None),
    )
    show(keys, _COLUMNS, as_json=as_json, title="keys")


@app.command("revoke")
def revoke(
    key_id: Annotated[str, typer.Argument(help="The key's id (from keys list).")],
    config: ConfigOption = None,
    as_json: Json = False,
) -> None:
    """Revoke a key: every gateway on this store refuses it within auth.change_poll_interval."""
    key = run(config, lambda t, actor: t.keys.revoke(actor, key_id))
    show([key], _COLUMNS, as_json=as_json, title="key revoked")


@app.command("rotate")
def rotate(
    key_id: Annotated[str, typer.Argument(help="The key's id (from keys list).")],
    grace: Annotated[
        str, typer.Option("--grace", help="How long the old secret keeps working: 24h, 0s.")
    ] = "0s",
    config: ConfigOption = None,
    as_json: Json = False,
) -> None:
    """Give a key a new secret (same id, limits and reports); print it once.

    With --grace 0s every gateway refuses the old secret within auth.change_poll_interval.
    """
    seconds = _duration("--grace", grace) or 0.0
    new = run(config, lambda t, actor: t.keys.rotate(actor, key_id, grace=seconds))
    show([new] if as_json else [new.key], _COLUMNS, as_json=as_json, title="key rotated")
    _secret(new.secret, new.key.id, as_json)
