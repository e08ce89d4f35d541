"""``fairgate audit list|verify``: read the audit trail and check its hash chain."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import orjson
import typer

from fairgate.cli.options import ConfigOption, fail
from fairgate.cli.tenancy import run, show

__all__ = ["HELP", "app"]

HELP = "The audit trail: every state change, sealed in a hash chain that `verify` checks."

app = typer.Typer(help=HELP, no_args_is_help=True)

Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
_COLUMNS = ("id", "seq", "at", "actor", "action", "target", "remote", "detail")


def _since(text: str | None) -> float | None:
    """``--since``: a duration back from now (``24h``, ``7d``) or an ISO 8601 time (UTC if
    it names no zone)."""
    from fairgate.core.durations import parse_duration

    if text is None:
        return None
    try:
        return datetime.now(UTC).timestamp() - parse_duration(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise fail(f"--since: {text!r} is neither a duration (24h) nor an ISO 8601 time") from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


@app.command("list")
def list_events(
    since: Annotated[
        str | None, typer.Option("--since", help="Only events since: 24h, 7d or 2026-01-31T12:00.")
    ] = None,
    actor: Annotated[
        str | None, typer.Option("--actor", help="Only this actor: user:olga, operator:root.")
    ] = None,
    action: Annotated[
        str | None, typer.Option("--action", help="Only this action: key.revoked.")
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=1000, help="At most this many events, the newest.")
    ] = 100,
    config: ConfigOption = None,
    as_json: Json = False,
) -> None:
    """List audit events, newest first."""
    start = _since(since)
    events = run(
        config,
        lambda t, operator: t.audit.list(
            operator, since=start, actor_name=actor, action=action, limit=limit
        ),
    )
    show(events, _COLUMNS, as_json=as_json, title="audit events")


@app.command("verify")
def verify(
    config: ConfigOption = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the result as one JSON object (broken too).")
    ] = False,
) -> None:
    """Recompute the hash chain: print its head, or the first broken link and exit 1."""
    from fairgate.store.audit_chain import Break

    result = run(config, lambda t, operator: t.audit.verify(operator))
    if isinstance(result, Break):
        if as_json:
            document = {
                "intact": False,
                "event_id": result.event_id,
                "seq": result.seq,
                "problem": result.kind,
                "message": result.message,
            }
            typer.echo(orjson.dumps(document).decode())
        raise fail(
            f"audit chain broken at event {result.event_id} (seq {result.seq}): {result.message}"
        )
    if as_json:
        document = {"intact": True, "events": result.seq, "head": result.hash.hex()}
        typer.echo(orjson.dumps(document).decode())
        return
    typer.echo(f"audit chain intact: {result.seq} events, head {result.hash.hex()}")
