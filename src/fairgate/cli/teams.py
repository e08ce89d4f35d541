"""``fairgate teams create|update|list``: teams under the configuration's organisations."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from fairgate.cli.options import ConfigOption
from fairgate.cli.tenancy import csv, key_limits, run, show

if TYPE_CHECKING:
    from fairgate.store.teams import Team
    from fairgate.tenancy import Actor, Tenancy

__all__ = ["HELP", "app"]

HELP = "Teams: created under an organisation; declared ones come from the configuration."

app = typer.Typer(help=HELP, no_args_is_help=True)

Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
Limit = Annotated[int | None, typer.Option(min=1, help="Per key: each key's default and ceiling.")]
Total = Annotated[int | None, typer.Option(min=1, help="All the team's keys together.")]


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
    total_rpm: Total = None,
    total_tpm: Total = None,
    total_rpd: Total = None,
    total_max_inflight: Total = None,
    max_keys_per_member: Annotated[
        int,
        typer.Option(min=1, max=1000, help="Live keys one member may own in the team."),
    ] = 10,
    config: ConfigOption = None,
    as_json: Json = False,
) -> None:
    """Create a team in an organisation (models: every one unless --models).

    A name the configuration declares under any organisation is reserved: refused.
    --rpm … --max-inflight bind each key (a key may narrow them, never widen
    them); --total-rpm … --total-max-inflight bind all the team's keys together."""
    limits = key_limits(rpm, tpm, rpd, max_inflight)
    totals = key_limits(total_rpm, total_tpm, total_rpd, total_max_inflight)
    team = run(
        config,
        lambda t, actor: t.teams.create(
            actor,
            org=org,
            name=name,
            models=csv(models),
            limits=limits,
            totals=totals,
            max_keys_per_member=max_keys_per_member,
        ),
    )
    show([team], _COLUMNS, as_json=as_json, title="team created")


@app.command("update")
def update(
    name: Annotated[str, typer.Argument(help="The team's name (declared ones too).")],
    rpm: Limit = None,
    tpm: Limit = None,
    rpd: Limit = None,
    max_inflight: Limit = None,
    total_rpm: Total = None,
    total_tpm: Total = None,
    total_rpd: Total = None,
    total_max_inflight: Total = None,
    max_keys_per_member: Annotated[
        int | None,
        typer.Option(min=1, max=1000, help="Live keys one member may own in the team."),
    ] = None,
    config: ConfigOption = None,
    as_json: Json = False,
) -> None:
    """Change a team's limits; an option left out keeps its value."""
    given = {
        "rpm": rpm,
        "tpm": tpm,
        "rpd": rpd,
        "max_in_flight": max_inflight,
        "total_rpm": total_rpm,
        "total_tpm": total_tpm,
        "total_rpd": total_rpd,
        "total_max_in_flight": total_max_inflight,
    }
    team = run(config, lambda t, actor: _update(t, actor, name, given, max_keys_per_member))
    show([team], _COLUMNS, as_json=as_json, title="team updated")


async def _update(
    t: Tenancy, actor: Actor, name: str, given: dict[str, int | None], keys: int | None
) -> Team:
    from fairgate.tenancy import Limits

    current = await t.teams.get(actor, name)
    value = {f: getattr(current, f) if v is None else v for f, v in given.items()}
    limits = Limits(value["rpm"], value["tpm"], value["rpd"], value["max_in_flight"])
    totals = Limits(
        value["total_rpm"], value["total_tpm"], value["total_rpd"], value["total_max_in_flight"]
    )
    if keys is None:
        return await t.teams.update(actor, name, limits=limits, totals=totals)
    return await t.teams.update(actor, name, limits=limits, totals=totals, max_keys_per_member=keys)


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
    "total_rpm",
    "total_tpm",
    "total_rpd",
    "total_max_in_flight",
    "max_keys_per_member",
    "disabled_at",
)
