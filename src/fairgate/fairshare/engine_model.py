"""A model of vLLM's priority scheduler, step by step, for the fair-share simulation.

What it keeps of vLLM (``vllm/v1/core/sched/scheduler.py``, ``request_queue.py``
with ``--scheduling-policy priority``):

- the waiting queue is a min-heap on (priority, arrival); a preempted request
  goes back into it with its original arrival;
- each step first serves the running requests in admission order; one that
  needs a new KV block when none is free preempts the running request with the
  largest (priority, arrival) (possibly itself), which loses its KV blocks and
  is recomputed from scratch when admitted again;
- waiting requests are admitted in heap order only in a step without
  preemptions, while their blocks fit; a waiting request never preempts, and
  the first one that does not fit stops admission (head of line);
- KV is paged: a request holds ``ceil(tokens / block_tokens)`` blocks.

Simplified: one step is one decode iteration for every scheduled request, a
prefill takes one step whatever its length, and there is no token budget per
step. Time is the step number.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

__all__ = ["EngineModel", "SimRequest"]


@dataclass(slots=True, eq=False)
class SimRequest:
    """One request inside the model engine; ``generated`` survives preemption, KV does not."""

    org: str
    client: int
    prompt: int
    output: int
    priority: int
    arrival: int
    seq: int
    within_share: bool
    admitted_at: int | None = None
    generated: int = 0
    kv_tokens: int = 0
    blocks: int = 0
    preemptions: int = field(default=0)


class EngineModel:
    """An engine with ``total_blocks`` KV blocks of ``block_tokens`` tokens each.

    At most ``max_running`` requests run at once (vLLM's ``max_num_seqs``).
    """

    def __init__(self, total_blocks: int, block_tokens: int, max_running: int = 256) -> None:
        self.total_blocks = total_blocks
        self.block_tokens = block_tokens
        self.max_running = max_running
        self.free_blocks = total_blocks
        self.running: list[SimRequest] = []
        self._waiting: list[tuple[int, int, int, SimRequest]] = []

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def submit(self, request: SimRequest) -> None:
        heapq.heappush(self._waiting, (request.priority, request.arrival, request.seq, request))

    def step(self, now: int) -> tuple[list[SimRequest], list[SimRequest]]:
        """Run one iteration; returns (finished, preempted) requests of this step."""
        preempted = self._decode()
        if not preempted:
            self._admit(now)
        finished = [r for r in self.running if r.generated >= r.output]
        if finished:
            for r in finished:
                self.free_blocks += r.blocks
                r.blocks = 0
            self.running = [r for r in self.running if r.generated < r.output]
        return finished, preempted

    def _decode(self) -> list[SimRequest]:
        preempted: list[SimRequest] = []
        running = self.running
        i = 0
        while i < len(running):
            request = running[i]
            if request.kv_tokens + 1 > request.blocks * self.block_tokens:
                while self.free_blocks == 0:
                    victim = max(running, key=lambda r: (r.priority, r.arrival, r.seq))
                    index = running.index(victim)
                    del running[index]
                    self._preempt(victim)
                    preempted.append(victim)
                    if index < i:
                        i -= 1
                    if victim is request:
                        break
                if request.blocks == 0:  # it was its own victim
                    continue
                request.blocks += 1
                self.free_blocks -= 1
            request.kv_tokens += 1
            request.generated += 1
            i += 1
        return preempted

    def _preempt(self, request: SimRequest) -> None:
        self.free_blocks += request.blocks
        request.blocks = 0
        request.kv_tokens = 0
        request.preemptions += 1
        self.submit(request)

    def _admit(self, now: int) -> None:
        while self._waiting and len(self.running) < self.max_running:
            request = self._waiting[0][3]
            tokens = request.prompt + request.generated
            needed = -(-tokens // self.block_tokens)
            if needed > self.free_blocks:
                return
            heapq.heappop(self._waiting)
            if request.admitted_at is None:
                request.admitted_at = now
            request.blocks = needed
            request.kv_tokens = tokens
            request.generated += 1  # the prefill samples the first (or next) token
            self.free_blocks -= needed
            self.running.append(request)
