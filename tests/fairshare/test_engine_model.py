"""The vLLM scheduler model: heap order, preemption victim, no preemption by waiting requests."""

from __future__ import annotations

from fairgate.fairshare.engine_model import EngineModel, SimRequest


def request(seq: int, priority: int, *, prompt: int = 16, output: int = 100) -> SimRequest:
    return SimRequest("A", seq, prompt, output, priority, arrival=seq, seq=seq, within_share=False)


def test_waiting_requests_are_admitted_in_priority_then_arrival_order() -> None:
    engine = EngineModel(total_blocks=2, block_tokens=16)
    late_urgent, early_lax, early_urgent = request(3, 0), request(1, 20), request(2, 0)
    for r in (late_urgent, early_lax, early_urgent):
        engine.submit(r)
    engine.step(0)
    assert engine.running == [early_urgent, late_urgent]
    assert engine.waiting == 1


def test_a_waiting_request_never_preempts_a_running_one() -> None:
    engine = EngineModel(total_blocks=3, block_tokens=16)
    lax = request(1, 50, prompt=40, output=8)  # holds all three blocks until it finishes
    urgent = request(2, 0)
    engine.submit(lax)
    engine.step(0)
    engine.submit(urgent)
    for now in range(1, 7):
        _, preempted = engine.step(now)
        assert preempted == []
        assert engine.running == [lax]
    for now in range(7, 9):
        engine.step(now)
    assert engine.running == [urgent]  # admitted once the blocks came free


def test_out_of_blocks_the_largest_priority_and_arrival_is_preempted() -> None:
    engine = EngineModel(total_blocks=3, block_tokens=16)
    within, borrower, later_borrower = request(1, 0), request(2, 10), request(3, 10)
    for r in (within, borrower, later_borrower):
        engine.submit(r)
    engine.step(0)  # all three hold one block; the 16th token needs a second one
    preempted: list[SimRequest] = []
    for now in range(1, 20):
        preempted += engine.step(now)[1]
        if preempted:
            break
    assert preempted[0] is later_borrower
    assert later_borrower.blocks == 0 and later_borrower.kv_tokens == 0
    assert later_borrower.generated > 0  # tokens survive, KV does not (recomputed later)
    assert within in engine.running


def test_finished_requests_free_their_blocks() -> None:
    engine = EngineModel(total_blocks=4, block_tokens=16)
    short = request(1, 0, prompt=10, output=3)
    engine.submit(short)
    finished: list[SimRequest] = []
    for now in range(10):
        finished += engine.step(now)[0]
    assert finished == [short]
    assert engine.free_blocks == 4
    assert engine.running == []
