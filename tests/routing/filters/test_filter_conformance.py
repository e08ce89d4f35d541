"""Every registered Filter returns a subset in order, and drops exactly what it should."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings

from fairgate.core.replica import ReplicaSnapshot
from fairgate.routing import FILTERS, RequestFeatures, build_filter

from ..replicas import MODEL, replica_lists

SHOULD_KEEP: dict[str, Callable[[ReplicaSnapshot], bool]] = {
    "healthy": lambda r: r.healthy,
    "breaker-closed": lambda r: not r.breaker_open,
    "serves-model": lambda r: r.model == MODEL,
    "kv-ceiling": lambda r: r.kv_usage is None or r.kv_usage < 0.95,
    "fair-share": lambda r: True,  # a request outside fair share fits everywhere
}


def test_every_registered_filter_is_covered() -> None:
    assert set(SHOULD_KEEP) == set(FILTERS)


@pytest.mark.parametrize("name", list(FILTERS))
@settings(max_examples=100, deadline=None)
@given(replicas=replica_lists)
def test_keeps_an_ordered_subset(name: str, replicas: list[ReplicaSnapshot]) -> None:
    kept = build_filter(name).filter(replicas, RequestFeatures(MODEL))
    expected = [r for r in replicas if SHOULD_KEEP[name](r)]
    if name == "kv-ceiling" and not expected:
        expected = replicas  # not strict: all above the ceiling keeps them all
    assert kept == expected


@pytest.mark.parametrize("name", list(FILTERS))
def test_empty_input_keeps_nothing(name: str) -> None:
    assert build_filter(name).filter([], RequestFeatures(MODEL)) == []
    assert build_filter(name).name == name
