"""Every routing plugin by its configuration name, and the strategies built from them.

The one place where names map to factories; nothing registers itself on import.

    build_scorer("queue-depth", {"scale": 8})      → QueueDepthScorer(scale=8.0)
    build_strategy("chat", {"scorers": {"queue-depth": 2, "kv-usage": 1}})

A strategy specification (the configuration's shape):

    filters: [healthy, breaker-closed, {name: kv-ceiling, ceiling: 0.9}]   # default: all five
    scorers: {queue-depth: 2, prefix-affinity: {weight: 3}}                # name → weight or
                                                                           #   {weight, params…}
    picker:  max-score            # or {name: softmax, temperature: 0.2}; default max-score

Every error is a ``ValueError`` whose message names the plugin and parameter.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, TypeVar

from fairgate.routing.filters import (
    BreakerClosedFilter,
    FairShareFilter,
    HealthyFilter,
    KvCeilingFilter,
    ServesModelFilter,
)
from fairgate.routing.pickers import (
    MaxScorePicker,
    PowerOfTwoPicker,
    RoundRobinPicker,
    SoftmaxPicker,
)
from fairgate.routing.plugin import Filter, Picker, Scorer
from fairgate.routing.scorers import (
    InFlightScorer,
    KvUsageScorer,
    PrefixAffinityScorer,
    QueueDepthScorer,
    SessionAffinityScorer,
    WeightScorer,
)
from fairgate.routing.strategy import Strategy, WeightedScorer

__all__ = [
    "FILTERS",
    "PICKERS",
    "PRESETS",
    "SCORERS",
    "build_filter",
    "build_picker",
    "build_scorer",
    "build_strategy",
    "preset",
    "strategy_for",
    "with_fair_share",
]

FILTERS: Mapping[str, type[Filter]] = MappingProxyType(
    {
        cls.name: cls
        for cls in (
            HealthyFilter,
            BreakerClosedFilter,
            ServesModelFilter,
            KvCeilingFilter,
            FairShareFilter,
        )
    }
)
SCORERS: Mapping[str, type[Scorer]] = MappingProxyType(
    {
        cls.name: cls
        for cls in (
            QueueDepthScorer,
            KvUsageScorer,
            InFlightScorer,
            WeightScorer,
            SessionAffinityScorer,
            PrefixAffinityScorer,
        )
    }
)
PICKERS: Mapping[str, type[Picker]] = MappingProxyType(
    {cls.name: cls for cls in (MaxScorePicker, PowerOfTwoPicker, SoftmaxPicker, RoundRobinPicker)}
)
PRESETS = ("chat", "batch", "long-context")
"""The built-in strategies, by name (see :func:`preset`)."""

_T = TypeVar("_T")


def build_filter(name: str, params: Mapping[str, object] | None = None) -> Filter:
    return _build("filter", FILTERS, name, params or {})


def build_scorer(name: str, params: Mapping[str, object] | None = None) -> Scorer:
    return _build("scorer", SCORERS, name, params or {})


def build_picker(name: str, params: Mapping[str, object] | None = None) -> Picker:
    return _build("picker", PICKERS, name, params or {})


def build_strategy(name: str, spec: Mapping[str, object]) -> Strategy:
    """A :class:`Strategy` from its specification (see the module docstring)."""
    unknown = set(spec) - {"filters", "scorers", "picker"}
    if unknown:
        raise ValueError(f"strategy {name}: unknown key(s) {', '.join(sorted(unknown))}")
    filters = tuple(
        build_filter(*_named(f"strategy {name} filter", item))
        for item in _list(name, spec.get("filters", list(FILTERS)))
    )
    scorers = tuple(_weighted(name, s, w) for s, w in _mapping(name, spec.get("scorers")).items())
    picker = build_picker(*_named(f"strategy {name} picker", spec.get("picker", "max-score")))
    return Strategy(name, filters, scorers, picker)


def preset(name: str) -> Strategy:
    """One of the built-in strategies: ``chat``, ``batch`` or ``long-context``."""
    scorers: dict[str, dict[str, object]] = {
        "chat": {
            "queue-depth": 2,
            "kv-usage": 1,
            "in-flight": 1,
            "prefix-affinity": 2,
            "session-affinity": 1,
        },
        "batch": {"kv-usage": 2, "queue-depth": 1, "in-flight": 1},
        "long-context": {"kv-usage": 3, "prefix-affinity": 2, "queue-depth": 1},
    }
    pickers = {"chat": "max-score", "batch": "power-of-two", "long-context": "max-score"}
    if name not in scorers:
        raise ValueError(f"unknown strategy preset {name!r}; known: {', '.join(PRESETS)}")
    return build_strategy(name, {"scorers": scorers[name], "picker": pickers[name]})


def strategy_for(spec: str | Mapping[str, object]) -> Strategy:
    """A model's strategy as configured: a preset's name, or a specification named ``custom``.

    Raises ``ValueError`` (naming the preset, plugin or parameter) for anything else.
    """
    if isinstance(spec, str):
        return preset(spec)
    if isinstance(spec, Mapping):
        return build_strategy("custom", spec)
    raise ValueError(f"expected a preset name or a strategy mapping, got {type(spec).__name__}")


def with_fair_share(strategy: Strategy) -> Strategy:
    """``strategy`` with the ``fair-share`` filter last among its filters if it lists its
    filters without it (a strategy that tunes ``kv-ceiling`` keeps fair share across
    replicas); ``strategy`` itself when it has the filter already."""
    if "fair-share" in strategy.filter_names:
        return strategy
    filters = (*strategy.filters, FairShareFilter())
    return Strategy(strategy.name, filters, strategy.scorers, strategy.picker)


def _build(kind: str, table: Mapping[str, type[_T]], name: str, params: Mapping[str, object]) -> _T:
    cls = table.get(name)
    if cls is None:
        raise ValueError(f"unknown {kind} {name!r}; known: {', '.join(table)}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    typed: dict[str, object] = {}
    for key, value in params.items():
        field = fields.get(key)
        if field is None:
            known = ", ".join(fields) or "none"
            raise ValueError(f"{kind} {name}: unknown parameter {key!r} (parameters: {known})")
        typed[key] = _typed(f"{kind} {name}: {key}", value, field.default)
    try:
        return cls(**typed)
    except ValueError as exc:
        raise ValueError(f"{kind} {name}: {exc}") from None


def _typed(where: str, value: object, default: object) -> object:
    """``value`` as the type of the parameter's default (an int is accepted as a float)."""
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
    elif isinstance(default, int):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif isinstance(default, float):
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    else:
        return value
    raise ValueError(f"{where} must be a {type(default).__name__}, got {value!r}")


def _named(where: str, item: object) -> tuple[str, dict[str, object]]:
    if isinstance(item, str):
        return item, {}
    if isinstance(item, Mapping) and isinstance(item.get("name"), str):
        params: dict[str, Any] = {k: v for k, v in item.items() if k != "name"}
        return item["name"], params
    raise ValueError(f"{where}: expected a name or a mapping with a name, got {item!r}")


def _weighted(strategy: str, name: object, value: object) -> WeightedScorer:
    where = f"strategy {strategy} scorer {name}"
    if isinstance(value, Mapping):
        params = dict(value)
        weight = params.pop("weight", 1.0)
    else:
        params, weight = {}, value
    if isinstance(weight, bool) or not isinstance(weight, int | float):
        raise ValueError(f"{where}: weight must be a number, got {weight!r}")
    return WeightedScorer(build_scorer(str(name), params), float(weight))


def _list(strategy: str, value: object) -> list[object]:
    if not isinstance(value, list | tuple):
        raise ValueError(f"strategy {strategy}: filters must be a list")
    return list(value)


def _mapping(strategy: str, value: object) -> Mapping[object, object]:
    if not isinstance(value, Mapping) or not value:
        raise ValueError(f"strategy {strategy}: scorers must map at least one scorer to a weight")
    return value
