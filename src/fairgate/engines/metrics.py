"""Engine load read from the engine's own Prometheus ``/metrics`` text.

Three numbers matter for routing and admission: requests running, requests
waiting, and KV-cache occupancy; a fourth, the engine's cumulative preemption
count, tells a learned pool capacity when the engine held more than it could
(``fairgate.fairshare.learned_capacity``). Each engine names them differently, and the
names drift between versions, so ``MetricNames`` is plain data the operator
may override.

    names = MetricNames("vllm:num_requests_running", "vllm:num_requests_waiting",
                        "vllm:kv_cache_usage_perc")
    parse_engine_metrics('vllm:num_requests_running{model_name="m",engine="0"} 3\\n'
                         'vllm:num_requests_running{model_name="m",engine="1"} 2\\n', names)
    == EngineLoad(running=5.0, waiting=None, kv_usage=None, preemptions=None)

Counts are summed over all label sets (several data-parallel engines, several
served model names behind one port). KV occupancy is a fraction in [0, 1] per
engine; the largest one is kept, because the fullest engine is the one that
preempts first.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

__all__ = [
    "LLAMA_SERVER_METRICS",
    "NO_METRICS",
    "VLLM_METRICS",
    "EngineLoad",
    "MetricNames",
    "parse_engine_metrics",
]


@dataclass(frozen=True, slots=True)
class MetricNames:
    """Sample names in the engine's ``/metrics`` text; ``None`` means "not exported".

    ``running`` and ``waiting`` are request counts (gauges); ``kv_usage`` is a
    KV-cache occupancy fraction in [0, 1] (vLLM calls it ``…_perc`` but exports
    a fraction); ``preemptions`` is a cumulative counter. A kind with all four
    ``None`` is not scraped at all.
    """

    running: str | None = None
    waiting: str | None = None
    kv_usage: str | None = None
    preemptions: str | None = None

    def names(self) -> tuple[str, ...]:
        return tuple(n for n in (self.running, self.waiting, self.kv_usage, self.preemptions) if n)

    def any(self) -> bool:
        return bool(self.names())


@dataclass(frozen=True, slots=True)
class EngineLoad:
    """One reading of an engine's load; ``None`` where the metric was absent."""

    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None
    preemptions: float | None = None


VLLM_METRICS = MetricNames(
    running="vllm:num_requests_running",
    waiting="vllm:num_requests_waiting",
    kv_usage="vllm:kv_cache_usage_perc",
    preemptions="vllm:num_preemptions_total",
)
# llama.cpp exports requests_processing and requests_deferred; kv_cache_usage_ratio
# exists only in older builds (newer ones leave kv_usage unknown, which is fine).
LLAMA_SERVER_METRICS = MetricNames(
    running="llamacpp:requests_processing",
    waiting="llamacpp:requests_deferred",
    kv_usage="llamacpp:kv_cache_usage_ratio",
)
NO_METRICS = MetricNames()


def _metric_name(line: str) -> str:
    end = len(line)
    for stop in ("{", " ", "\t"):
        index = line.find(stop)
        if index != -1:
            end = min(end, index)
    return line[:end]


def _relevant_lines(text: str, wanted: frozenset[str]) -> Iterable[str]:
    # Only the wanted samples and their HELP/TYPE comments reach the parser:
    # vLLM's page is mostly histograms, and a malformed line elsewhere must not
    # cost the reading.
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(maxsplit=3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE") and parts[2] in wanted:
                yield line
        elif _metric_name(line) in wanted:
            yield line


def parse_engine_metrics(text: str, names: MetricNames) -> EngineLoad:
    """The load in a Prometheus text exposition, read with ``names``.

    Raises ``ValueError`` when a line of a wanted metric is malformed. NaN and
    infinite samples are ignored; a metric with no usable sample is ``None``.
    """
    wanted = frozenset(names.names())
    if not wanted:
        return EngineLoad()
    values: dict[str, list[float]] = {}
    page = "\n".join(_relevant_lines(text, wanted)) + "\n"
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            if sample.name in wanted and math.isfinite(sample.value):
                values.setdefault(sample.name, []).append(float(sample.value))

    def total(name: str | None) -> float | None:
        found = values.get(name) if name else None
        return sum(found) if found else None

    def largest(name: str | None) -> float | None:
        found = values.get(name) if name else None
        return max(found) if found else None

    return EngineLoad(
        running=total(names.running),
        waiting=total(names.waiting),
        kv_usage=largest(names.kv_usage),
        preemptions=total(names.preemptions),
    )
