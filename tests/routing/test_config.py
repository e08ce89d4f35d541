"""A model's ``routing`` in the configuration file: built at load, so a bad one is refused there."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fairgate.config import ConfigError, load_config
from fairgate.routing import strategy_for


def _load(tmp_path: Path, routing: str) -> list[str]:
    """Load one model with ``routing: <routing>``; its diagnostics (empty when valid)."""
    path = tmp_path / "gateway.yaml"
    text = f"""\
        models:
          - name: m
            routing: {routing}
            upstreams: [{{name: u, url: "http://127.0.0.1:8000"}}]
        """
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    try:
        config = load_config(path, env={})
    except ConfigError as error:
        return [str(d).removeprefix(f"{path}:") for d in error.diagnostics]
    strategy_for(config.models[0].routing)  # what the gateway builds at start-up
    return []


@pytest.mark.parametrize(
    "routing",
    [
        "chat",
        "batch",
        "long-context",
        "{scorers: {prefix-affinity: 3, in-flight: 1}, picker: round-robin}",
        "{filters: [healthy], scorers: {queue-depth: {weight: 2, scale: 8}}}",
    ],
)
def test_presets_and_specifications_are_accepted(tmp_path: Path, routing: str) -> None:
    assert _load(tmp_path, routing) == []


@pytest.mark.parametrize(
    ("routing", "message"),
    [
        ("chatty", "3:14: models[0].routing: unknown strategy preset 'chatty'"),
        ("{scorers: {queue-depht: 1}}", "3:14: models[0].routing: unknown scorer 'queue-depht'"),
        (
            "{scorers: {queue-depth: {weight: 1, scale: -1}}}",
            "3:14: models[0].routing: scorer queue-depth: scale must be a positive number",
        ),
        ("{scorers: {kv-usage: 1}, picker: fastest}", "3:14: models[0].routing: unknown picker"),
        ("5", "3:14: models[0].routing: expected a preset name or a mapping, got 5"),
    ],
)
def test_a_bad_strategy_is_a_configuration_error_at_its_line(
    tmp_path: Path, routing: str, message: str
) -> None:
    [found] = _load(tmp_path, routing)
    assert found.startswith(message)


def _load_section(tmp_path: Path, section: str) -> tuple[bool | None, list[str]]:
    path = tmp_path / "gateway.yaml"
    text = f"""\
        models:
          - name: m
            upstreams: [{{name: u, url: "http://127.0.0.1:8000"}}]
        {section}
        """
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    try:
        config = load_config(path, env={})
    except ConfigError as error:
        return None, [str(d).removeprefix(f"{path}:") for d in error.diagnostics]
    return config.routing.fair_share, []


def test_share_aware_routing_is_on_unless_turned_off(tmp_path: Path) -> None:
    assert _load_section(tmp_path, "") == (True, [])
    assert _load_section(tmp_path, "routing: {fair_share: false}") == (False, [])
    value, errors = _load_section(tmp_path, 'routing: {fair_share: "no"}')
    assert value is None
    assert len(errors) == 1 and errors[0].startswith("4:23: routing.fair_share: expected true")
