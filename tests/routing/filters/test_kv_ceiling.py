"""kv-ceiling: full replicas are dropped, unknown ones kept, and all-full is a choice."""

from __future__ import annotations

import pytest

from fairgate.routing import RequestFeatures
from fairgate.routing.filters.kv_ceiling import KvCeilingFilter

from ..replicas import MODEL, replica


def test_replicas_at_or_above_the_ceiling_are_dropped_unknown_kept() -> None:
    replicas = [replica("a", kv_usage=0.5), replica("b", kv_usage=0.9), replica("c")]
    kept = KvCeilingFilter(ceiling=0.9).filter(replicas, RequestFeatures(MODEL))
    assert [r.name for r in kept] == ["a", "c"]


def test_when_all_are_full_it_keeps_them_unless_strict() -> None:
    full = [replica("a", kv_usage=0.99), replica("b", kv_usage=1.0)]
    assert KvCeilingFilter(0.95).filter(full, RequestFeatures(MODEL)) == full
    assert KvCeilingFilter(0.95, strict=True).filter(full, RequestFeatures(MODEL)) == []


@pytest.mark.parametrize("ceiling", [0.0, -0.1, 1.5, float("nan")])
def test_a_ceiling_outside_the_unit_interval_is_refused(ceiling: float) -> None:
    with pytest.raises(ValueError):
        KvCeilingFilter(ceiling)
