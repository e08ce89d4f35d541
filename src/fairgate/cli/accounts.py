"""``fairgate accounts approve|list|suspend|delete``: web accounts, run by the operator.

The operator's shell is ``proxy_admin`` at the root (as for every tenancy
command); approval creates the tenancy user named after the address and binds
it to the team through the same services the admin API calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from fairgate.cli.options import ConfigOption, fail, load_or_exit
from fairgate.cli.tenancy import operator, show

if TYPE_CHECKING:
    from fairgate.accounts import Accounts
    from fairgate.tenancy import Actor

__all__ = ["HELP", "app"]

HELP = (
    "Web accounts: people who signed up on the front door wait here until approved "
    "into a team (docs/security.md)."
)

app = typer.Typer(help=HELP, no_args_is_help=True)

T = TypeVar("T")
Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
Email = Annotated[str, typer.Argument(help="The account's e-mail address.")]
_COLUMNS = ("email", "state", "team", "created_at")


def _run(config: Path | None, work: Callable[[Accounts, Actor], Awaitable[T]]) -> T:
    """Run ``work`` on the configuration's store as the operator; exit 1 with a reason."""
    from fairgate.accounts import build_accounts
    from fairgate.core.clock import SystemClock
    from fairgate.core.errors import GatewayError, StoreUnavailable
    from fairgate.state import MemoryCounterStore
    from fairgate.tenancy import open_tenancy

    cfg = load_or_exit(config)
    actor = operator()

    async def main() -> T:
        async with open_tenancy(cfg) as tenancy:
            # nobody signs in here: the guess counters are this command's own
            parts = build_accounts(
                cfg.accounts, tenancy.store, tenancy, SystemClock(), state=MemoryCounterStore()
            )
            try:
                return await work(parts.accounts, actor)
            finally:
                await parts.aclose()

    try:
        return asyncio.run(main())
    except GatewayError as error:
        raise fail(error.message) from None
    except StoreUnavailable as error:
        raise fail(f"store unavailable: {error}") from None


@app.command("approve")
def approve(
    email: Email,
    team: Annotated[str, typer.Option("--team", help="The team the person joins.")],
    role: Annotated[
        str, typer.Option("--role", help="Their role on the team: member, viewer or team_admin.")
    ] = "member",
    config: ConfigOption = None,
    as_json: Json = False,
) -> None:
    """Approve a pending (or suspended) account into a team; the person can then sign in
    and create keys there. A suspended account loses the roles it held on its former
    team. An unknown address or team is refused."""
    account = _run(config, lambda a, actor: a.approve(actor, email, team=team, role=role))
    show([account], _COLUMNS, as_json=as_json, title="account approved")


@app.command("list")
def list_accounts(
    pending: Annotated[
        bool, typer.Option("--pending", help="Only accounts waiting for approval.")
    ] = False,
    config: ConfigOption = None,
    as_json: Json = False,
) -> None:
    """List accounts, oldest first."""
    accounts = _run(config, lambda a, _actor: a.list(pending=pending))
    show(accounts, _COLUMNS, as_json=as_json, title="pending accounts" if pending else "accounts")


@app.command("suspend")
def suspend(email: Email, config: ConfigOption = None, as_json: Json = False) -> None:
    """Suspend an account: its web sessions end at once and it cannot sign in. Keys it
    created keep working until revoked (fairgate keys list / keys revoke)."""
    account = _run(config, lambda a, actor: a.suspend(actor, email))
    show([account], _COLUMNS, as_json=as_json, title="account suspended")


@app.command("delete")
def delete(email: Email, config: ConfigOption = None) -> None:
    """Delete an account and its sessions (the address may sign up again). Its user stays,
    disabled; keys it created keep working until revoked."""
    _run(config, lambda a, actor: a.delete(actor, email))
    typer.echo(f"deleted the account of {email.strip().lower()}")
