"""``fairgate projects create|list``: projects inside teams."""

from __future__ import annotations

from typing import Annotated

import typer

from fairgate.cli.options import ConfigOption
from fairgate.cli.tenancy import run, show

__all__ = ["HELP", "app"]

HELP = "Projects: named groups of keys inside a team."

app = typer.Typer(help=HELP, no_args_is_help=True)

Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
_COLUMNS = ("team", "name", "created_at", "disabled_at")


@app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="The new project's name.")],
    team: Annotated[str, typer.Option("--team", help="Its team.")],
    config: ConfigOption = None,
    as_json: Json = False,
) -> None:
    """Create a project in a team."""
    project = run(config, lambda t, actor: t.projects.create(actor, team=team, name=name))
    show([project], _COLUMNS, as_json=as_json, title="project created")


@app.command("list")
def list_projects(
    team: Annotated[str | None, typer.Option("--team", help="Only this team.")] = None,
    config: ConfigOption = None,
    as_json: Json = False,
) -> None:
    """List projects."""
    projects = run(config, lambda t, actor: t.projects.list(actor, team=team))
    show(projects, _COLUMNS, as_json=as_json, title="projects")
