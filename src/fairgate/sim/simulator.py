"""The simulator's parts in one object: built once from a SimConfig, handed to the endpoints."""

from __future__ import annotations

from typing import Any

from fairgate.sim.config import SimConfig
from fairgate.sim.engine import Engine
from fairgate.sim.faults import Faults
from fairgate.sim.inputs import InputParser
from fairgate.sim.metrics import EngineGauges
from fairgate.sim.record import Recorder
from fairgate.sim.stats import SimStats
from fairgate.sim.tokenizer import Tokenizer

__all__ = ["Simulator"]


class Simulator:
    """Config, tokenizer, parser, counters, faults, record and (unless instant) the engine.

    ``engine`` is ``None`` with ``tokens_per_second == 0``: requests are then
    answered on the spot and ``inflight`` stands in for the running count.
    """

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.tokenizer = Tokenizer(config.seed)
        # With the engine, prompt ids feed the prefix cache; without it only counts matter.
        self.inputs = InputParser(config, Tokenizer(config.seed, exact=not config.instant))
        self.stats = SimStats()
        self.faults = Faults(config.faults)
        self.recorder = Recorder(config.record)
        self.engine: Engine | None = None if config.instant else Engine(config, self.stats)
        self.inflight = 0

    def gauges(self) -> EngineGauges:
        if self.engine is None:
            return EngineGauges(running=self.inflight, waiting=0, kv_usage=0.0)
        scheduler, kv = self.engine.scheduler, self.engine.kv
        tokens = sum(seq.computed for seq in scheduler.running())
        return EngineGauges(scheduler.num_running, scheduler.num_waiting, kv.usage, tokens)

    def reset(self) -> None:
        """Clear the record, the counters, the faults and the prefix cache."""
        self.recorder.clear()
        self.stats.reset()
        self.faults.reset()
        if self.engine is not None:
            self.engine.kv.reset_prefix_cache()

    def stats_json(self) -> dict[str, Any]:
        gauges = self.gauges()
        kv = self.engine.kv if self.engine is not None else None
        return {
            "running": gauges.running,
            "waiting": gauges.waiting,
            "kv_blocks_used": kv.used_blocks if kv else 0,
            "kv_blocks_total": kv.num_blocks if kv else 0,
            "kv_blocks_cached": kv.cached_blocks if kv else 0,
            "kv_cache_usage": gauges.kv_usage,
            **self.stats.to_json(),
        }

    def batch_json(self) -> dict[str, Any]:
        """The batch now: each running sequence's request id and priority, in admission
        order, the number waiting and the KV usage (cheap to poll, unlike the stats)."""
        gauges = self.gauges()
        running = (
            [
                {"request_id": seq.request_id, "priority": seq.priority}
                for seq in self.engine.scheduler.running()
            ]
            if self.engine is not None
            else []
        )
        return {"running": running, "waiting": gauges.waiting, "kv_cache_usage": gauges.kv_usage}
