"""The lock-free families expose exactly what prometheus_client's own do."""

from __future__ import annotations

import re

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from fairgate.observability.loop_metrics import LoopCounter, LoopGauge, LoopHistogram

_CREATED = re.compile(rb"^(\w+_created(?:\{[^}]*\})?) \S+$", re.M)


def _exposition(counter: type[Counter], histogram: type[Histogram], gauge: type[Gauge]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    requests = counter("t_requests", "Requests", ["model", "status"], registry=registry)
    duration = histogram("t_duration", "Time", ["model"], buckets=(0.1, 1, 10), registry=registry)
    overhead = histogram("t_overhead", "Own time", buckets=(0.001, 0.01), registry=registry)
    open_ = gauge("t_open", "Open", registry=registry)
    saturation = gauge("t_saturation", "Saturation", ["pool"], registry=registry)
    requests.labels("m", "200").inc()
    requests.labels("m", "200").inc(3)
    requests.labels("m", "500").inc(0)
    for value in (0.0, 0.05, 0.1, 0.5, 1, 3, 10, 100):  # the bounds themselves included
        duration.labels("m").observe(value)
        overhead.observe(value / 100)
    open_.inc()
    open_.inc(2)
    open_.dec()
    saturation.labels("p").set(0.75)
    # every _created line holds the time its child was made: the same lines, other times
    return _CREATED.sub(rb"\1 T", generate_latest(registry))


def test_the_exposition_is_the_librarys_line_for_line() -> None:
    ours = _exposition(LoopCounter, LoopHistogram, LoopGauge)
    assert ours == _exposition(Counter, Histogram, Gauge)
    assert b't_requests_total{model="m",status="200"} 4.0' in ours
    assert b't_duration_bucket{le="1.0",model="m"} 5.0' in ours
    assert b"t_requests_created" in ours  # created series kept


def test_a_counter_refuses_to_go_down() -> None:
    counter = LoopCounter("t_down", "Down", registry=CollectorRegistry())
    with pytest.raises(ValueError):
        counter.inc(-1)
