"""Diagnostic and ConfigError: the shape every consumer prints."""

from __future__ import annotations

import types

import fairgate.config
from fairgate.config import ConfigError, Diagnostic, Mark


def test_a_diagnostic_prints_as_file_line_column_message() -> None:
    diagnostic = Diagnostic("gateway.yaml", 12, 7, "unknown key 'x'")
    assert str(diagnostic) == "gateway.yaml:12:7: unknown key 'x'"
    assert (diagnostic.file, diagnostic.line, diagnostic.column) == ("gateway.yaml", 12, 7)
    assert diagnostic.mark == Mark("gateway.yaml", 12, 7)


def test_a_position_without_lines_prints_the_source_alone() -> None:
    assert str(Diagnostic("env:FAIRGATE_LISTEN__PORT", 0, 0, "bad")) == (
        "env:FAIRGATE_LISTEN__PORT: bad"
    )
    assert str(Diagnostic.at(Mark("gateway.yaml", 0, 0), "not found")) == "gateway.yaml: not found"


def test_config_error_carries_every_diagnostic_one_per_line() -> None:
    first = Diagnostic("f", 1, 1, "a")
    second = Diagnostic("f", 2, 3, "b")
    error = ConfigError(iter([first, second]))
    assert error.diagnostics == [first, second]
    assert str(error) == "f:1:1: a\nf:2:3: b"


def test_the_package_exports_exactly_its_public_names() -> None:
    exported = set(fairgate.config.__all__)
    assert {"load_config", "Config", "ConfigError", "Diagnostic", "SecretRef"} <= exported
    assert all(hasattr(fairgate.config, name) for name in exported)
    public = {
        name
        for name, value in vars(fairgate.config).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name != "annotations"  # from __future__
    }
    assert public == exported
