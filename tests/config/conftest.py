"""Helpers for configuration tests: write a YAML file, load it, read the diagnostics."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from fairgate.config import Config, ConfigError, load_config

MINIMAL = """\
models:
  - name: m
    upstreams:
      - {name: u, url: "http://127.0.0.1:8000"}
"""

WriteConfig = Callable[[str], Path]


def with_minimal(text: str) -> str:
    """``text`` (dedented) followed by a minimal valid ``models`` section."""
    return textwrap.dedent(text).lstrip("\n") + MINIMAL


Problems = Callable[..., list[str]]
Load = Callable[..., Config]


@pytest.fixture
def write_config(tmp_path: Path) -> WriteConfig:
    """Write dedented YAML to ``gateway.yaml`` in a fresh directory; return its path."""

    def write(text: str) -> Path:
        path = tmp_path / "gateway.yaml"
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return path

    return write


@pytest.fixture
def load(write_config: WriteConfig) -> Load:
    """Load YAML text that must be valid."""

    def run(text: str, env: Mapping[str, str] | None = None) -> Config:
        return load_config(write_config(text), env=env or {})

    return run


@pytest.fixture
def problems(write_config: WriteConfig) -> Problems:
    """Load YAML text that must be refused; its diagnostics as ``line:column: message``.

    The file name is cut off (it is a temporary path); environment diagnostics
    keep their ``env:FAIRGATE_…`` prefix.
    """

    def run(text: str, env: Mapping[str, str] | None = None) -> list[str]:
        path = write_config(text)
        with pytest.raises(ConfigError) as info:
            load_config(path, env=env or {})
        return [str(d).removeprefix(f"{path}:") for d in info.value.diagnostics]

    return run
