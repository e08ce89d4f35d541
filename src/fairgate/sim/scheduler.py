"""The engine's scheduler, modelled on vLLM v1 (``vllm/v1/core/sched/scheduler.py``).

Pure: no event loop, no I/O; time is passed in. One ``step(now)`` is one engine
iteration:

1. **Running first.** Each running sequence whose prefill is over produces one
   token. If that token's KV slot needs a new block and none is free, the running
   sequence with the largest ``(priority, arrival)`` is preempted (possibly the
   one asking): its blocks are freed, its ``computed`` drops to 0 and it goes back
   to the waiting heap with its original arrival (recompute). If it was the one
   asking, the rest of the batch waits for the next step.
2. **Then waiting, only if nothing was preempted.** The heap head (smallest
   ``(priority, arrival)``) is admitted while the batch has room and its blocks
   (prompt plus tokens already generated, minus the cached prefix) are free. A
   head that does not fit stops admission: a waiting request never preempts a
   running one. Prefill takes ``prefill_seconds`` scaled by the uncached fraction.

Worked example (block size 4, 4 blocks): A(priority 0) and B(priority 10) each
hold 2 blocks; when A's next token needs a fifth block, B is preempted, never A.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator

from fairgate.sim.kv_cache import KVCache, chain_hashes
from fairgate.sim.sequence import SeqState, Sequence
from fairgate.sim.stats import Preemption, SimStats

__all__ = ["Scheduler"]


class Scheduler:
    """A waiting heap, a running batch of at most ``max_num_seqs``, and a KV cache.

    Contract: ``add`` queues, ``abort`` frees at once (waiting or running), ``step``
    advances one iteration and calls ``notify`` on every sequence that produced a
    token or finished. ``policy="fcfs"`` preempts the most recently admitted
    sequence instead of the largest ``(priority, arrival)``; the caller rejects
    non-zero priorities under fcfs, as vLLM does.
    """

    def __init__(
        self,
        kv: KVCache,
        stats: SimStats,
        *,
        max_num_seqs: int,
        prefill_seconds: float,
        policy: str = "priority",
    ) -> None:
        self.kv = kv
        self.stats = stats
        self.max_num_seqs = max_num_seqs
        self.prefill_seconds = prefill_seconds
        self.policy = policy
        self._running: list[Sequence] = []
        self._heap: list[tuple[int, float, int, Sequence]] = []
        self._waiting = 0
        self._order = 0
        self._last_step: float | None = None

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        return self._waiting

    @property
    def idle(self) -> bool:
        return not self._running and not self._waiting

    def running(self) -> Iterator[Sequence]:
        return iter(tuple(self._running))

    def add(self, seq: Sequence) -> None:
        self._order += 1
        seq.order = self._order
        seq.state = SeqState.WAITING
        self._push(seq)

    def abort(self, seq: Sequence) -> None:
        if seq.done:
            return
        if seq.state is SeqState.RUNNING:
            self._running.remove(seq)
            self._release(seq)
        else:
            self._waiting -= 1  # its heap entry is skipped when it surfaces
        seq.state = SeqState.ABORTED
        self.stats.aborted += 1
        seq.notify()

    def step(self, now: float) -> None:
        self._account(now)
        if not self._decode(now):
            self._admit(now)

    def _account(self, now: float) -> None:
        if self._last_step is not None and self._running:
            dt = max(0.0, now - self._last_step)
            seconds = self.stats.running_seconds
            for seq in self._running:
                seconds[seq.priority] = seconds.get(seq.priority, 0.0) + dt
                if seq.ready_at > now:
                    self.stats.prefill_seconds += dt
                else:
                    self.stats.decode_seconds += dt
        self._last_step = now
        if self._running:
            self.stats.steps += 1
            self.stats.busy_slots += len(self._running)

    def _decode(self, now: float) -> bool:
        """Produce a token for each ready running sequence; True if any was preempted."""
        preempted = False
        i = 0
        while i < len(self._running):
            seq = self._running[i]
            if seq.ready_at > now:
                i += 1
                continue
            if seq.computed < seq.total_tokens:
                # The last token produced must be written to the KV cache first.
                if seq.computed + 1 > len(seq.blocks) * self.kv.block_size:
                    grown, victims, before = self._grow(seq, i)
                    preempted = preempted or victims > 0
                    if not grown:
                        return True
                    i -= before
                seq.computed += 1
                self._register(seq)
            self._produce(seq, now)
            if seq.state is SeqState.FINISHED:
                continue  # removed from the batch: the next one moved into slot i
            i += 1
        return preempted

    def _grow(self, seq: Sequence, index: int) -> tuple[bool, int, int]:
        """Give ``seq`` (at ``index`` in the batch) one more block, preempting as needed.

        Returns whether ``seq`` got its block, how many sequences were preempted,
        and how many of those stood before ``index``.
        """
        victims = before = 0
        while True:
            block = self.kv.allocate_one()
            if block is not None:
                seq.blocks.append(block)
                return True, victims, before
            victim = self._victim()
            if self._running.index(victim) < index:
                before += 1
            self._preempt(victim)
            victims += 1
            if victim is seq:
                return False, victims, before

    def _victim(self) -> Sequence:
        if self.policy == "priority":
            return max(self._running, key=lambda s: (s.priority, s.arrival, s.order))
        return self._running[-1]

    def _preempt(self, seq: Sequence) -> None:
        self._running.remove(seq)
        self._release(seq)
        seq.computed = 0
        seq.registered = 0
        seq.ready_at = math.inf
        seq.preemptions += 1
        seq.state = SeqState.WAITING
        self._push(seq)
        self.stats.preempted(Preemption(seq.request_id, seq.priority, seq.order))

    def _produce(self, seq: Sequence, now: float) -> None:
        if seq.generated == 0:
            self.stats.prompt_tokens += len(seq.prompt)
        seq.generated += 1
        self.stats.generation_tokens += 1
        if seq.generated >= seq.max_tokens:
            self._running.remove(seq)
            self._release(seq)
            seq.state = SeqState.FINISHED
        seq.notify()

    def _admit(self, now: float) -> None:
        bs = self.kv.block_size
        while self._waiting and len(self._running) < self.max_num_seqs:
            seq = self._peek()
            total = seq.total_tokens
            chain_hashes(seq.tokens(len(seq.hashes) * bs, total), bs, seq.root, seq.hashes)
            # At least one token is always computed, as in vLLM: a full hit stops
            # one block short so the last position produces the next token.
            hit = self.kv.cached_prefix(seq.hashes[: (total - 1) // bs])
            new = -(-total // bs) - len(hit)
            if not self.kv.can_allocate(hit, new):
                break
            heapq.heappop(self._heap)
            self._waiting -= 1
            seq.blocks = self.kv.allocate(hit, new)
            seq.computed = total
            seq.registered = len(hit)
            self._register(seq)
            self._admitted(seq, len(hit) * bs, now)

    def _admitted(self, seq: Sequence, cached: int, now: float) -> None:
        total = seq.total_tokens
        if seq.cached_tokens < 0:
            seq.cached_tokens = cached
            self.stats.started += 1
        self.stats.prefix_queries += total
        self.stats.prefix_hits += cached
        if cached:
            self.stats.prefix_hit_requests += 1
        seq.state = SeqState.RUNNING
        seq.admitted_at = now
        seq.ready_at = now + self.prefill_seconds * (total - cached) / total
        self._running.append(seq)

    def _register(self, seq: Sequence) -> None:
        """Name every block that has become full since the last call."""
        bs = self.kv.block_size
        full = seq.computed // bs
        if full <= seq.registered:
            return
        if len(seq.hashes) < full:
            start = len(seq.hashes) * bs
            chain_hashes(seq.tokens(start, full * bs), bs, seq.root, seq.hashes)
        for j in range(seq.registered, full):
            self.kv.register(seq.blocks[j], seq.hashes[j])
        seq.registered = full

    def _release(self, seq: Sequence) -> None:
        self.kv.free(seq.blocks)
        seq.blocks = []

    def _push(self, seq: Sequence) -> None:
        heapq.heappush(self._heap, (seq.priority, seq.arrival, seq.order, seq))
        self._waiting += 1

    def _peek(self) -> Sequence:
        while self._heap[0][3].state is not SeqState.WAITING:
            heapq.heappop(self._heap)  # aborted while waiting
        return self._heap[0][3]
