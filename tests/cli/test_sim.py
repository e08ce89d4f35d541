"""``fairgate sim --help`` documents every option, and bad flags fail with a reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer.core
import typer.main
from typer.testing import CliRunner

from fairgate.cli import app


def _sim_command() -> Any:
    group: Any = typer.main.get_command(app)
    return group.commands["sim"]


def test_every_option_has_help_text_and_appears_in_help() -> None:
    result = CliRunner().invoke(app, ["sim", "--help"], env={"COLUMNS": "200"}, terminal_width=200)
    assert result.exit_code == 0
    options = [p for p in _sim_command().params if isinstance(p, typer.core.TyperOption)]
    documented = [p for p in options if p.help and p.help.strip()]
    assert documented == options
    for option in options:
        for name in option.opts:
            assert name in result.output, name
    assert "vLLM's own default is fcfs" in result.output


def test_the_required_options_exist() -> None:
    names = {name for p in _sim_command().params for name in p.opts}
    wanted = {
        "--host", "--port", "--model", "--speed", "--tokens-per-second", "--ttft",
        "--max-num-seqs", "--kv-blocks", "--block-size", "--max-tokens-default",
        "--scheduling-policy", "--api-key", "--personality", "--record", "--fail-next",
        "--fail-status", "--stall-before-headers", "--stall-before-first-token",
        "--stall-mid-stream", "--close-mid-stream", "--metrics-delay", "--seed",
        "--embedding-dim",
    }  # fmt: skip
    assert wanted <= names


def test_bad_values_exit_non_zero_with_a_reason() -> None:
    result = CliRunner().invoke(app, ["sim", "--kv-blocks", "0"])
    assert result.exit_code == 2
    assert "kv-blocks must be >= 1" in result.output
    result = CliRunner().invoke(app, ["sim", "--ttft", "soon"])
    assert result.exit_code == 2
    assert "not a duration" in result.output


def test_every_option_is_documented_in_the_guide() -> None:
    guide = (Path(__file__).parents[2] / "docs" / "sim.md").read_text()
    for param in _sim_command().params:
        for name in (*param.opts, *param.secondary_opts):
            if name != "--help":
                assert f"`{name}" in guide, name
