"""``fairgate db upgrade``: bring the store's schema to this version's newest revision."""

from __future__ import annotations

import asyncio

import typer

from fairgate.cli.options import ConfigOption, fail, load_or_exit

__all__ = ["HELP", "app"]

HELP = "The durable store (SQLite or PostgreSQL) named by store.url or store.url_file."

app = typer.Typer(help=HELP, no_args_is_help=True)


@app.command("upgrade")
def upgrade(config: ConfigOption = None) -> None:
    """Apply the schema migrations the store lacks, then exit.

    `fairgate serve` and the tenancy commands do the same step when they open the
    store; run this to migrate before a rollout. Safe to run twice, and on
    PostgreSQL safe to run from several hosts at once.
    """
    from fairgate.core.errors import StoreUnavailable
    from fairgate.store import current_revision
    from fairgate.store import upgrade as upgrade_store
    from fairgate.tenancy import build_store

    cfg = load_or_exit(config)

    async def main() -> tuple[str | None, str, str]:
        store = build_store(cfg)
        await store.connect()
        try:
            before = await current_revision(store)
            after = await upgrade_store(store)
        finally:
            await store.close()
        return before, after, str(store.url)

    try:
        before, after, url = asyncio.run(main())
    except StoreUnavailable as error:
        raise fail(f"store unavailable: {error}") from None
    except ValueError as error:
        raise fail(f"store: {error}") from None
    if before == after:
        typer.echo(f"store {url} is at revision {after}: nothing to do")
    else:
        typer.echo(f"store {url} upgraded from {before or 'empty'} to revision {after}")
