"""prometheus_client's Counter, Histogram and Gauge, counted without a lock.

Every value of a prometheus_client metric takes a ``threading.Lock`` on each ``inc``
or ``observe``, behind two checks that the metric is a label child: ~4 Python calls an
increment, and a request on the full path made 13 increments (49 calls of the
library's, ~4 % of the request's own time in the CPU profile). The families the request
path counts are only ever written from the event loop's thread, one writer, so their
values are plain floats here; ``/metrics`` reads them through the library's own
sample code (``_child_samples``), so the exposition is the library's, name for name and
line for line, ``_created`` included (``tests/observability/test_loop_metrics.py``
compares both).

Use these only for families written from the event loop alone; anything a thread
increments stays a library metric.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

__all__ = ["LoopCounter", "LoopGauge", "LoopHistogram"]


class _Value:
    """A float with the reading side of the library's value (``get``, no exemplar)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def get(self) -> float:
        return self.value

    def get_exemplar(self) -> None:
        return None


class LoopCounter(Counter):
    """A ``Counter`` whose children count without a lock (no exemplars)."""

    def _metric_init(self) -> None:
        self._value: Any = _Value()
        self._created = time.time()

    def inc(self, amount: float = 1, exemplar: dict[str, str] | None = None) -> None:
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        self._value.value += amount


class LoopHistogram(Histogram):
    """A ``Histogram`` whose children count without a lock (no exemplars)."""

    def _metric_init(self) -> None:
        self._created = time.time()
        self._sum: Any = _Value()
        self._buckets: Any = [_Value() for _ in self._upper_bounds]

    def observe(self, amount: float, exemplar: dict[str, str] | None = None) -> None:
        self._sum.value += amount
        # the first bound not below the amount, as the library's loop finds it (the last
        # bound is +Inf)
        self._buckets[bisect_left(self._upper_bounds, amount)].value += 1


class LoopGauge(Gauge):
    """A ``Gauge`` (the default ``all`` mode) whose children change without a lock."""

    def _metric_init(self) -> None:
        self._value: Any = _Value()

    def inc(self, amount: float = 1) -> None:
        self._value.value += amount

    def dec(self, amount: float = 1) -> None:
        self._value.value -= amount

    def set(self, value: float) -> None:
        self._value.value = float(value)
