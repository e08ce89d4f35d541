"""The registry: every plugin by its stable name, parameters checked, strategies from specs."""

from __future__ import annotations

import dataclasses
import pathlib

import pytest

from fairgate.routing import (
    FILTERS,
    PICKERS,
    PRESETS,
    SCORERS,
    build_filter,
    build_picker,
    build_scorer,
    build_strategy,
    preset,
    strategy_for,
)
from fairgate.routing.filters import KvCeilingFilter
from fairgate.routing.pickers import SoftmaxPicker
from fairgate.routing.scorers import QueueDepthScorer

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "routing.md"


def test_the_stable_names() -> None:
    assert list(FILTERS) == [
        "healthy",
        "breaker-closed",
        "serves-model",
        "kv-ceiling",
        "fair-share",
    ]
    assert list(SCORERS) == [
        "queue-depth",
        "kv-usage",
        "in-flight",
        "weight",
        "session-affinity",
        "prefix-affinity",
    ]
    assert list(PICKERS) == ["max-score", "power-of-two", "softmax", "round-robin"]
    assert PRESETS == ("chat", "batch", "long-context")


def test_parameters_are_typed_and_checked() -> None:
    assert build_scorer("queue-depth", {"scale": 8}) == QueueDepthScorer(scale=8.0)
    assert build_filter("kv-ceiling", {"ceiling": 1, "strict": True}) == KvCeilingFilter(1.0, True)
    assert build_picker("softmax", {"temperature": 0.5}) == SoftmaxPicker(0.5)


@pytest.mark.parametrize(
    ("build", "name", "params", "message"),
    [
        (build_scorer, "queue-lenght", {}, "unknown scorer 'queue-lenght'"),
        (build_scorer, "queue-depth", {"scal": 1}, "unknown parameter 'scal'"),
        (build_scorer, "queue-depth", {"scale": -1}, "scorer queue-depth: scale must be"),
        (build_scorer, "queue-depth", {"scale": "4"}, "scale must be a float"),
        (build_scorer, "queue-depth", {"scale": True}, "scale must be a float"),
        (build_scorer, "session-affinity", {"vnodes": 1.5}, "vnodes must be a int"),
        (build_filter, "kv-ceiling", {"strict": "yes"}, "strict must be a bool"),
        (build_filter, "healthy", {"x": 1}, "parameters: none"),
        (build_picker, "softmax", {"temperature": float("inf")}, "temperature must be a float"),
    ],
)
def test_bad_names_and_parameters_are_reported(
    build: object, name: str, params: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        build(name, params)  # type: ignore[operator]


def test_a_strategy_from_its_specification() -> None:
    strategy = build_strategy(
        "chat",
        {
            "filters": ["healthy", {"name": "kv-ceiling", "ceiling": 0.9}],
            "scorers": {"queue-depth": 2, "prefix-affinity": {"weight": 3}},
            "picker": {"name": "softmax", "temperature": 0.2},
        },
    )
    assert [f.name for f in strategy.filters] == ["healthy", "kv-ceiling"]
    assert [(w.scorer.name, w.weight) for w in strategy.scorers] == [
        ("queue-depth", 2.0),
        ("prefix-affinity", 3.0),
    ]
    assert strategy.picker == SoftmaxPicker(0.2)
    defaults = build_strategy("d", {"scorers": {"kv-usage": 1}})
    assert [f.name for f in defaults.filters] == list(FILTERS)
    assert defaults.picker.name == "max-score"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({}, "scorers must map"),
        ({"scorers": {"kv-usage": 1}, "pickr": "max-score"}, "unknown key"),
        ({"scorers": {"kv-usage": "heavy"}}, "weight must be a number"),
        ({"scorers": {"kv-usage": -1}}, "must be ≥ 0"),
        ({"scorers": {"kv-usage": 1}, "filters": "healthy"}, "filters must be a list"),
        ({"scorers": {"kv-usage": 1}, "filters": [{"ceiling": 1}]}, "expected a name"),
        ({"scorers": {"kv-usage": 1}, "filters": ["healthy", "healthy"]}, "appears twice"),
    ],
)
def test_bad_specifications_are_reported(spec: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_strategy("s", spec)


@pytest.mark.parametrize("name", PRESETS)
def test_presets_are_the_same_code_with_other_weights(name: str) -> None:
    strategy = preset(name)
    assert strategy.name == name
    assert [f.name for f in strategy.filters] == list(FILTERS)
    assert all(w.scorer.name in SCORERS for w in strategy.scorers)
    with pytest.raises(ValueError):
        preset("fastest")


def test_a_configured_strategy_is_a_preset_name_or_a_specification() -> None:
    assert strategy_for("batch") == preset("batch")
    custom = strategy_for({"scorers": {"in-flight": 1}, "picker": "round-robin"})
    assert (custom.name, custom.picker.name) == ("custom", "round-robin")
    with pytest.raises(ValueError, match="unknown strategy preset 'fastest'"):
        strategy_for("fastest")
    with pytest.raises(ValueError, match="expected a preset name or a strategy mapping"):
        strategy_for(3)  # type: ignore[arg-type]


def test_every_plugin_and_parameter_is_documented() -> None:
    text = DOCS.read_text(encoding="utf-8")
    for table in (FILTERS, SCORERS, PICKERS):
        for name, cls in table.items():
            assert f"`{name}`" in text, name
            for field in dataclasses.fields(cls):  # type: ignore[arg-type]
                if field.init:
                    assert f"`{field.name}`" in text, f"{name}.{field.name}"
    for name in PRESETS:
        assert f"`{name}`" in text
