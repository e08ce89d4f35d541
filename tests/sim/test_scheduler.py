"""The scheduler without sockets: heap order, admission, preemption choice, abort, prefix hits."""

from __future__ import annotations

import itertools

from fairgate.sim.kv_cache import KVCache, root_hash
from fairgate.sim.scheduler import Scheduler
from fairgate.sim.sequence import SeqState, Sequence
from fairgate.sim.stats import SimStats

ROOT = root_hash(None, "m")


def _output_id(i: int) -> int:
    return 100_000 + i


def _seq(
    rid: str, priority: int, arrival: float, prompt: int = 4, max_tokens: int = 8, base: int = 1
) -> Sequence:
    return Sequence(
        request_id=rid,
        priority=priority,
        arrival=arrival,
        prompt=list(range(base, base + prompt)),
        max_tokens=max_tokens,
        root=ROOT,
        output_id=_output_id,
    )


def _scheduler(
    blocks: int, block_size: int = 4, seqs: int = 16, policy: str = "priority"
) -> Scheduler:
    kv = KVCache(blocks, block_size)
    return Scheduler(kv, SimStats(), max_num_seqs=seqs, prefill_seconds=0.0, policy=policy)


def _run(s: Scheduler, steps: int, start: int = 0) -> None:
    for t in range(start, start + steps):
        s.step(float(t))


def test_waiting_heap_admits_by_priority_then_arrival() -> None:
    s = _scheduler(blocks=64, seqs=1)
    blocker = _seq("blocker", 0, 0.0, max_tokens=2)
    s.add(blocker)
    s.step(0.0)
    late_urgent = _seq("late-urgent", 1, 3.0)
    early_lax = _seq("early-lax", 5, 1.0)
    early_urgent = _seq("early-urgent", 1, 2.0)
    for seq in (early_lax, late_urgent, early_urgent):
        s.add(seq)
    order: list[str] = []
    for t in range(1, 60):
        s.step(float(t))
        for seq in s.running():
            if seq.request_id not in order and seq is not blocker:
                order.append(seq.request_id)
    assert order == ["early-urgent", "late-urgent", "early-lax"]


def test_preemption_takes_the_largest_priority_then_the_latest_arrival() -> None:
    # 6 blocks of 4 tokens; prompts of 4 tokens; each sequence grows to 4+12 = 4 blocks.
    s = _scheduler(blocks=6, block_size=4)
    seqs = [
        _seq("a0", 0, 0.0, max_tokens=12, base=100),
        _seq("b5", 5, 1.0, max_tokens=12, base=200),
        _seq("c5", 5, 2.0, max_tokens=12, base=300),
        _seq("d1", 1, 3.0, max_tokens=12, base=400),
    ]
    for seq in seqs:
        s.add(seq)
    running_at_preemption: list[set[tuple[int, float]]] = []
    seen = 0
    for t in range(200):
        before = {(q.priority, q.arrival) for q in s.running()}
        s.step(float(t))
        log = list(s.stats.preemption_log)
        for p in log[seen:]:
            running_at_preemption.append(before)
            victim = next(q for q in seqs if q.request_id == p.request_id)
            # the victim is the largest (priority, arrival) of those that were running
            assert (victim.priority, victim.arrival) == max(before)
        seen = len(log)
        if all(q.state is SeqState.FINISHED for q in seqs):
            break
    assert all(q.state is SeqState.FINISHED for q in seqs)
    victims = [p.request_id for p in s.stats.preemption_log]
    assert victims, "the cache is too small for all four: someone must be preempted"
    assert "a0" not in victims
    assert victims[0] == "c5"
    assert s.kv.used_blocks == 0


def test_a_waiting_request_never_preempts_a_running_one() -> None:
    s = _scheduler(blocks=4, block_size=4)
    lax = _seq("lax", 9, 0.0, prompt=12, max_tokens=3)  # 3 blocks, grows to 4
    s.add(lax)
    s.step(0.0)
    urgent = _seq("urgent", 0, 1.0, prompt=8, max_tokens=2, base=500)  # 2 blocks, 1 free
    s.add(urgent)
    for t in range(1, 4):
        s.step(float(t))
        if lax.state is SeqState.RUNNING:
            assert urgent.state is SeqState.WAITING
    assert lax.preemptions == 0
    _run(s, 10, start=4)
    assert urgent.state is SeqState.FINISHED and lax.state is SeqState.FINISHED


def test_a_lone_sequence_that_needs_a_block_preempts_itself_last() -> None:
    s = _scheduler(blocks=3, block_size=4)
    first = _seq("first", 0, 0.0, prompt=4, max_tokens=8)  # grows to 3 blocks
    second = _seq("second", 0, 1.0, prompt=4, max_tokens=8)
    s.add(first)
    s.add(second)
    _run(s, 100)
    assert first.state is SeqState.FINISHED and second.state is SeqState.FINISHED
    assert first.preemptions == 0
    assert second.preemptions >= 1
    # tokens already produced are kept across the preemption (recompute, not restart)
    assert second.generated == 8


def test_fcfs_preempts_the_most_recently_admitted() -> None:
    s = _scheduler(blocks=5, block_size=4, policy="fcfs")
    a, b = _seq("a", 0, 0.0, max_tokens=12), _seq("b", 0, 1.0, max_tokens=12)
    s.add(a)
    s.add(b)
    _run(s, 100)
    assert [p.request_id for p in s.stats.preemption_log][:1] == ["b"]


def test_abort_frees_blocks_at_once_running_or_waiting() -> None:
    s = _scheduler(blocks=8, block_size=4, seqs=1)
    running, waiting = _seq("r", 0, 0.0, prompt=9), _seq("w", 0, 1.0)
    s.add(running)
    s.add(waiting)
    s.step(0.0)
    assert s.kv.used_blocks == 3 and s.num_waiting == 1
    s.abort(waiting)
    assert s.num_waiting == 0
    s.abort(running)
    assert s.kv.used_blocks == 0 and s.num_running == 0
    assert s.stats.aborted == 2
    s.step(1.0)  # the aborted heap entry is skipped, nothing is admitted
    assert s.idle


def test_prefix_cache_hits_are_reported_once_and_capped_one_token_short() -> None:
    s = _scheduler(blocks=32, block_size=4)
    first = _seq("first", 0, 0.0, prompt=12, max_tokens=1)
    s.add(first)
    _run(s, 3)
    second = _seq("second", 0, 10.0, prompt=12, max_tokens=1)
    s.add(second)
    _run(s, 3, start=10)
    # 12 prompt tokens = 3 full blocks, but the last token is always computed: 2 blocks hit
    assert first.cached_tokens == 0
    assert second.cached_tokens == 8
    assert s.stats.prefix_hits == 8 and s.stats.prefix_hit_requests == 1


def test_another_salt_misses_the_prefix_cache() -> None:
    s = _scheduler(blocks=32, block_size=4)
    first = _seq("first", 0, 0.0, prompt=12, max_tokens=1)
    s.add(first)
    _run(s, 3)
    other = _seq("other", 0, 5.0, prompt=12, max_tokens=1)
    other.root = root_hash("tenant-b", "m")
    s.add(other)
    _run(s, 3, start=5)
    assert other.cached_tokens == 0


def test_running_seconds_accumulate_per_priority() -> None:
    s = _scheduler(blocks=64, block_size=4)
    ids = itertools.count()
    for priority in (0, 0, 10):
        s.add(_seq(f"s{next(ids)}", priority, 0.0, max_tokens=4))
    _run(s, 10)
    seconds = s.stats.running_seconds
    assert seconds[0] > seconds[10] > 0
