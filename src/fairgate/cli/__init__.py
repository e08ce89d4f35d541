"""The ``fairgate`` command line: flags in, a command or a Config out, no logic of its own.

Each command group lives in its own module and is registered here, in one place.
"""

from __future__ import annotations

import gc

import typer

__all__ = ["app", "main"]

app = typer.Typer(
    name="fairgate",
    help="fairgate: an OpenAI-compatible gateway with fair-share scheduling.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register() -> None:
    # Imported here, not at module top, so `fairgate --help` stays fast and a
    # command's heavy imports load only when that command runs.
    from fairgate.cli import sim as _sim

    app.command("sim", help=_sim.HELP)(_sim.sim)
    from fairgate.cli import config as _config

    app.command("check-config", help=_config.HELP)(_config.check_config)
    from fairgate.cli import serve as _serve

    app.command("serve", help=_serve.HELP)(_serve.serve)
    app.command("control-plane", help=_serve.CONTROL_PLANE_HELP)(_serve.control_plane)
    from fairgate.cli import demo as _demo

    app.command("demo", help=_demo.HELP)(_demo.demo)
    from fairgate.cli import audit as _audit
    from fairgate.cli import budgets as _budgets
    from fairgate.cli import db as _db
    from fairgate.cli import keys as _keys
    from fairgate.cli import projects as _projects
    from fairgate.cli import teams as _teams
    from fairgate.cli import users as _users

    app.add_typer(_db.app, name="db", help=_db.HELP)
    app.add_typer(_teams.app, name="teams", help=_teams.HELP)
    app.add_typer(_projects.app, name="projects", help=_projects.HELP)
    app.add_typer(_keys.app, name="keys", help=_keys.HELP)
    app.add_typer(_users.app, name="users", help=_users.HELP)
    app.add_typer(_users.tokens_app, name="admin-tokens", help=_users.TOKENS_HELP)
    app.add_typer(_budgets.app, name="budgets", help=_budgets.HELP)
    app.add_typer(_audit.app, name="audit", help=_audit.HELP)
    from fairgate.cli import accounts as _accounts

    app.add_typer(_accounts.app, name="accounts", help=_accounts.HELP)
    from fairgate.cli import allowlists as _allowlists

    app.add_typer(_allowlists.app, name="allowlists", help=_allowlists.HELP)
    from fairgate.cli import people as _people

    app.add_typer(_people.app, name="people", help=_people.HELP)
    from fairgate.cli import export as _export

    app.command("export", help=_export.HELP)(_export.export)
    from fairgate.cli import share as _share

    app.command("share", help=_share.HELP)(_share.share)
    from fairgate.cli import agent as _agent

    app.add_typer(_agent.app, name="agent", help=_agent.HELP)
    from fairgate.cli import fleet as _fleet

    app.add_typer(_fleet.nodes_app, name="nodes", help=_fleet.NODES_HELP)
    app.add_typer(_fleet.replicas_app, name="replicas", help=_fleet.REPLICAS_HELP)


_register()


# A command's start imports and builds some 200,000 objects that live as long as the
# process; the collector's passes over them while they are being made found nothing to
# free and cost ~15 % of a gateway's start-up CPU. Until a command settles its heap
# (``fairgate.run.settle_heap`` for serve and control-plane), the youngest generation is
# collected every this many net allocations instead of CPython's 700.
_STARTING_THRESHOLD = 50_000


def main() -> None:
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(_STARTING_THRESHOLD, middle, oldest)
    app()
