"""Cumulative counters of the simulated engine, read by ``/metrics`` and ``/sim/stats``."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Preemption", "SimStats"]

_PREEMPTION_LOG = 10_000


@dataclass(frozen=True, slots=True)
class Preemption:
    """One preemption: who lost its KV blocks, and its place in the (priority, arrival) order."""

    request_id: str
    priority: int
    arrival_order: int


@dataclass(slots=True)
class SimStats:
    """Counters since start-up or the last ``/sim/reset``.

    Token counters follow vLLM: ``prompt_tokens`` counts a request's whole prompt
    once, when its first token is out; ``generation_tokens`` counts every output
    token; the prefix cache counters count tokens looked up and tokens hit at each
    admission. ``running_seconds`` is seconds spent in the running batch, summed
    over sequences, per priority. The preemption log keeps the last 10,000.
    """

    received: int = 0
    started: int = 0
    finished: int = 0
    aborted: int = 0
    finished_by_reason: dict[str, int] = field(default_factory=dict)
    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    prefix_hit_requests: int = 0
    preemptions: int = 0
    preemptions_by_priority: dict[int, int] = field(default_factory=dict)
    preemption_log: deque[Preemption] = field(default_factory=lambda: deque(maxlen=_PREEMPTION_LOG))
    running_seconds: dict[int, float] = field(default_factory=dict)
    steps: int = 0
    busy_slots: int = 0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0

    def reset(self) -> None:
        fresh = SimStats()
        for name in self.__slots__:
            setattr(self, name, getattr(fresh, name))

    def finish(self, reason: str) -> None:
        self.finished += 1
        self.finished_by_reason[reason] = self.finished_by_reason.get(reason, 0) + 1

    def preempted(self, record: Preemption) -> None:
        self.preemptions += 1
        by = self.preemptions_by_priority
        by[record.priority] = by.get(record.priority, 0) + 1
        self.preemption_log.append(record)

    def to_json(self) -> dict[str, Any]:
        """The counters as JSON-ready values; priorities become string keys."""
        return {
            "received": self.received,
            "started": self.started,
            "finished": self.finished,
            "aborted": self.aborted,
            "finished_by_reason": dict(self.finished_by_reason),
            "prompt_tokens_total": self.prompt_tokens,
            "generation_tokens_total": self.generation_tokens,
            "prefix_cache_hits": self.prefix_hit_requests,
            "prefix_cache_hit_tokens": self.prefix_hits,
            "prefix_cache_query_tokens": self.prefix_queries,
            "preemptions_total": self.preemptions,
            "steps_total": self.steps,
            "preemptions_by_priority": {str(p): n for p, n in self.preemptions_by_priority.items()},
            "preempted_priorities": [p.priority for p in self.preemption_log],
            "preempted": [
                {
                    "request_id": p.request_id,
                    "priority": p.priority,
                    "arrival_order": p.arrival_order,
                }
                for p in self.preemption_log
            ],
            "running_seconds_by_priority": {
                str(p): round(s, 6) for p, s in self.running_seconds.items()
            },
        }
