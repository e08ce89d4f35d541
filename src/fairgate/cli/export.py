"""``fairgate export``: the spend report of a period on stdout, as the admin API renders it."""

from __future__ import annotations

import sys
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Annotated

import typer

from fairgate.cli.options import ConfigOption, fail
from fairgate.cli.tenancy import run

if TYPE_CHECKING:
    from fairgate.accounting import SpendReport
    from fairgate.tenancy import Actor, Tenancy

__all__ = ["HELP", "export"]

HELP = "Write the spend report of a period to stdout (json, csv or parsable2, like sreport)."

_CHUNK = timedelta(days=1)
_PROGRESS_AFTER_DAYS = 7  # longer periods are read day by day, with a progress bar


def export(
    from_: Annotated[str, typer.Option("--from", help="First day, YYYY-MM-DD (UTC).")],
    to: Annotated[str, typer.Option("--to", help="The day after the last, YYYY-MM-DD (UTC).")],
    group_by: Annotated[
        str,
        typer.Option(
            "--group-by", help="Any of org,team,project,key,model,pool,tag; '' for totals."
        ),
    ] = "org,team",
    fmt: Annotated[
        str, typer.Option("--format", help="csv, json or parsable2 (like sreport --parsable2).")
    ] = "csv",
    config: ConfigOption = None,
) -> None:
    """Sum the usage records of [--from, --to) per group and print them.

    October is `--from 2025-10-01 --to 2025-11-01`. A request with several tags
    counts once under each of them. Periods longer than a week are read one day
    at a time, with a progress bar on stderr; stdout holds only the report.
    """
    from fairgate.accounting import check_format, parse_day, parse_group_by, render
    from fairgate.core.errors import GatewayError

    try:
        check_format(fmt)
        start, end = parse_day(from_, field="--from"), parse_day(to, field="--to")
        groups = parse_group_by(group_by)
    except GatewayError as error:
        raise fail(error.message) from None
    report = run(config, lambda tenancy, actor: _report(tenancy, actor, start, end, groups))
    sys.stdout.write(render(report, fmt))
    sys.stdout.flush()


async def _report(
    tenancy: Tenancy, actor: Actor, start: datetime, end: datetime, groups: tuple[str, ...]
) -> SpendReport:
    from fairgate.accounting import spend

    days = (end - start).days
    if days <= _PROGRESS_AFTER_DAYS:
        return await spend(tenancy.store, actor, start, end, groups)
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True)) as bar:
        task = bar.add_task(f"reading {days} days", total=days)

        def advance(done: int, _count: int) -> None:
            bar.update(task, completed=done)

        return await spend(tenancy.store, actor, start, end, groups, chunk=_CHUNK, progress=advance)
