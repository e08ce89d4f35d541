"""``fairgate budgets set|list|delete|increase``: GPU-hour caps per scope, model and period."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from fairgate.cli.options import ConfigOption, fail
from fairgate.cli.tenancy import run, show

if TYPE_CHECKING:
    from fairgate.core.money import Money

__all__ = ["HELP", "app"]

HELP = (
    "Budgets: GPU-hours per day, week or month (UTC) on org:NAME, team:NAME, "
    "project:TEAM/NAME, key:ID or tag:NAME, for every model or one."
)

app = typer.Typer(help=HELP, no_args_is_help=True)

Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
_COLUMNS = ("id", "scope", "model", "period", "max", "soft", "effective_max", "updated_at")


def _gpu_hours(option: str, text: str) -> Money:
    from decimal import InvalidOperation

    from fairgate.core.money import Money

    try:
        return Money.exact(text)
    except (InvalidOperation, ValueError):
        raise fail(
            f"{option}: {text!r} is not a number of GPU-hours with at most six decimals"
        ) from None


@app.command("set")
def set_budget(
    scope: Annotated[
        str,
        typer.Option(
            "--scope",
            help="org:NAME, team:NAME, project:T/NAME, key:ID, tag:org:ORG/TAG, "
            "tag:team:T/TAG or tag:TAG (proxy-wide).",
        ),
    ],
    period: Annotated[str, typer.Option("--period", help="day, week or month (UTC).")],
    max_hours: Annotated[str, typer.Option("--max", help="The cap, in GPU-hours.")],
    soft: Annotated[
        str | None, typer.Option("--soft", help="Alert threshold, in GPU-hours.")
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", help="Only this model (an alias is stored as the model's name)."),
    ] = None,
    config: ConfigOption = None,
    as_json: Json = False,
) -> None:
    """Set the budget of a scope, model and period (a second `set` changes it)."""
    cap = _gpu_hours("--max", max_hours)
    alert = None if soft is None else _gpu_hours("--soft", soft)
    budget = run(
        config,
        lambda t, actor: t.budgets.set(
            actor, scope=scope, period=period, max=cap, soft=alert, model=model
        ),
    )
    show([budget], _COLUMNS, as_json=as_json, title="budget set")


@app.command("list")
def list_budgets(
    scope: Annotated[str | None, typer.Option("--scope", help="Only this scope.")] = None,
    config: ConfigOption = None,
    as_json: Json = False,
) -> None:
    """List budgets with the cap in force now (increases included)."""
    budgets = run(config, lambda t, actor: t.budgets.list(actor, scope=scope))
    show(budgets, _COLUMNS, as_json=as_json, title="budgets")


@app.command("delete")
def delete(
    budget_id: Annotated[str, typer.Argument(help="The budget's id (from budgets list).")],
    config: ConfigOption = None,
    as_json: Json = False,
) -> None:
    """Delete a budget and its increases."""
    budget = run(config, lambda t, actor: t.budgets.delete(actor, budget_id))
    show([budget], _COLUMNS, as_json=as_json, title="budget deleted")


@app.command("increase")
def increase(
    budget_id: Annotated[str, typer.Argument(help="The budget's id (from budgets list).")],
    by: Annotated[str, typer.Option("--by", help="GPU-hours to add.")],
    until: Annotated[
        str | None, typer.Option("--until", help="End, UTC: 2026-12-31T00:00Z.")
    ] = None,
    lasting: Annotated[str | None, typer.Option("--for", help="Or a duration: 7d, 12h.")] = None,
    config: ConfigOption = None,
    as_json: Json = False,
) -> None:
    """Raise a budget's cap for a while, whatever its period."""
    from fairgate.core.durations import parse_duration
    from fairgate.core.errors import BadRequest
    from fairgate.tenancy.budget_record import parse_moment

    amount = _gpu_hours("--by", by)
    if (until is None) == (lasting is None):
        raise fail("give exactly one of --until and --for")
    try:
        end = None if until is None else parse_moment(until)
        seconds = None if lasting is None else parse_duration(lasting)
    except BadRequest as error:
        raise fail(f"--until: {error.message}") from None
    except ValueError as error:
        raise fail(f"--for: {error}") from None
    budget = run(
        config,
        lambda t, actor: t.budgets.increase(
            actor, budget_id, by=amount, until=end, lasting=seconds
        ),
    )
    show([budget], _COLUMNS, as_json=as_json, title="budget increased")
