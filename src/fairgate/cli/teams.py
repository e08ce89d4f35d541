"""``fairgate teams create|list``: teams under the configuration's organisations."""

from __future__ import annotations

from typing import Annotated

import typer

from fairgate.cli.options import ConfigOption
from fairgate.cli.tenancy import csv, run, show

__all__ = ["HELP", "app"]

HELP = "Teams: created under an organisation; declared ones come from the configuration."

app = typer.Typer(help=HELP, no_args_is_help=True)

Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
Limit = Annotated[int | None, typer.Option(min=1, help="Default for the team's keys.")]


@app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="The new team's name.")],
    org: Annotated[str, typer.Option("--org", help="Its organisation.")],
    models: Annotated[
        str | None, typer.Option("--models", help="Allowed models, a,b ('' = none).")
    ] = None,
    rpm: Limit = None,
    tpm: Limit = None,
    rpd: Limit = None,
    max_inflight: Limit = None,
    config: ConfigOption = None,
    as_json: Json = False,
) -> None:
    """Create a team in an organisation (models: every one unless --models).

    A name the configuration declares under any organisation is reserved: refused.
    """
    from fairgate.tenancy import KeyLimits

    limits = KeyLimits(rpm=rpm, tpm=tpm, rpd=rpd, max_in_flight=max_inflight)
    team = run(
        config,
        lambda t, actor: t.teams.create(
            actor, org=org, name=name, models=csv(models), limits=limits
        ),
    )
    show([team], _COLUMNS, as_json=as_json, title="team created")


@app.command("list")
def list_teams(
    org: Annotated[str | None, typer.Option("--org", help="Only this organisation.")] = None,
    config: ConfigOption = None,
    as_json: Json = False,
) -> None:
    """List teams."""
    teams = run(config, lambda t, actor: t.teams.list(actor, org=org))
    show(teams, _COLUMNS, as_json=as_json, title="teams")


_COLUMNS = (
    "name",
    "org",
    "declared",
    "models",
    "rpm",
    "tpm",
    "rpd",
    "max_in_flight",
    "disabled_at",
)
