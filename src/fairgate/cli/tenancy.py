"""What the tenancy commands share: the store opened as the operator, tables or JSON out.

The operator's shell on the gateway host is ``proxy_admin`` at the root (the
audit trail records ``operator:<login name>``). Each command opens the store of
the configuration, upgrades its schema and syncs the declared organisations,
then calls the same tenancy service the admin API calls.
"""

from __future__ import annotations

import asyncio
import getpass
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import orjson
import typer

from fairgate.cli.options import fail, load_or_exit

if TYPE_CHECKING:
    from fairgate.tenancy import Actor, Limits, Tenancy

__all__ = ["csv", "operator", "run", "show"]

T = TypeVar("T")


def run(config: Path | None, work: Callable[[Tenancy, Actor], Awaitable[T]]) -> T:
    """Run ``work`` against the configuration's store as the operator; exit 1 with a reason."""
    from fairgate.core.errors import GatewayError, StoreUnavailable
    from fairgate.tenancy import open_tenancy

    cfg = load_or_exit(config)
    actor = operator()

    async def main() -> T:
        async with open_tenancy(cfg) as tenancy:
            return await work(tenancy, actor)

    try:
        return asyncio.run(main())
    except GatewayError as error:
        raise fail(error.message) from None
    except StoreUnavailable as error:
        raise fail(f"store unavailable: {error}") from None
    except ValueError as error:
        raise fail(f"store: {error}") from None


def key_limits(
    rpm: int | None, tpm: int | None, rpd: int | None, max_in_flight: int | None
) -> Limits:
    """Limits from the command line, or exit 1 with the reason (a value out of range)."""
    from fairgate.core.errors import GatewayError
    from fairgate.tenancy import Limits

    try:
        return Limits(rpm=rpm, tpm=tpm, rpd=rpd, max_in_flight=max_in_flight)
    except GatewayError as error:
        raise fail(error.message) from None


def show(records: Sequence[object], columns: Sequence[str], *, as_json: bool, title: str) -> None:
    """Records as a Rich table of ``columns``, or as a JSON list of every public field."""
    from fairgate.tenancy import public

    rows = [public(r) for r in records]
    if as_json:
        typer.echo(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(_cell(row.get(column)) for column in columns))
    Console(file=sys.stdout, width=200).print(table)


def csv(text: str | None) -> list[str] | None:
    """``a,b`` → ["a", "b"]; "" → [] (an empty allowlist); None stays None."""
    if text is None:
        return None
    return [part.strip() for part in text.split(",") if part.strip()]


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ",".join(str(v) for v in value) or "(none)"
    return str(value)


def operator() -> Actor:
    """The operator's actor: ``operator:<login name>``, proxy_admin at the root."""
    from fairgate.tenancy import Actor

    return Actor.operator(_login())


def _login() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"
