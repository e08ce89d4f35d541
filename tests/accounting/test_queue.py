"""The recorder's queue: a full queue drops fairly between teams, never a served record for
an unserved one."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from accounting.samples import record
from fairgate.accounting import Recorder, UsageRecord
from fairgate.accounting.queue import TenantQueue, is_served


def served(team: str) -> UsageRecord:
    return record(org="o", team=team, replica="r1", attempts=1)


def refused(team: str) -> UsageRecord:
    return record(org="o", team=team, replica="", attempts=0, status=429, outcome="refused")


class Collects:
    """A writer that keeps what it is given."""

    def __init__(self) -> None:
        self.written: list[UsageRecord] = []

    async def write(self, batch: Sequence[UsageRecord]) -> int:
        self.written.extend(batch)
        return len(batch)


def test_a_record_is_served_when_it_reached_an_engine() -> None:
    assert is_served(served("a"))
    assert is_served(record(replica="", attempts=1))  # sent, then failed: may have used a GPU
    assert not is_served(refused("a"))


async def test_one_teams_flood_of_refusals_never_costs_another_teams_record() -> None:
    writer = Collects()
    recorder = Recorder(writer, capacity=50)  # not started: nothing leaves the queue
    victims = [served("victim") if i % 2 else refused("victim") for i in range(20)]
    for i in range(1000):
        recorder.record(refused("flood"))
        if i % 50 == 0 and victims:
            assert recorder.record(victims.pop()) is True
    assert await recorder.drain(timeout=10) is True
    assert len([r for r in writer.written if r.team == "victim"]) == 20
    assert len(writer.written) == 50
    assert recorder.stats.dropped == 1000 + 20 - 50


def test_refusals_never_displace_served_records() -> None:
    queue = TenantQueue(10)
    kept = [served("a") for _ in range(10)]
    for r in kept:
        assert queue.push(r) is None
    newcomer = refused("b")
    assert queue.push(newcomer) is newcomer
    assert queue.take(100) == kept


def test_a_team_loses_records_only_while_it_holds_the_most() -> None:
    queue = TenantQueue(4)
    for _ in range(4):
        queue.push(refused("a"))
    assert queue.push(refused("b")) is not None  # one of a's makes room
    assert queue.push(served("b")) is not None  # a served record displaces a refusal
    late = refused("a")
    assert queue.push(late) is late  # a still holds the most refusals: its own goes
    teams = [(r.team, is_served(r)) for r in queue.take(10)]
    assert sorted(teams) == [("a", False), ("a", False), ("b", False), ("b", True)]


def test_a_full_queue_of_served_records_drops_from_the_team_holding_most() -> None:
    queue = TenantQueue(3)
    for _ in range(3):
        queue.push(served("a"))
    newcomer = served("b")
    displaced = queue.push(newcomer)
    assert displaced is not None and displaced.team == "a"
    own = served("a")
    assert queue.push(own) is own  # a holds 2, b 1: a's own newcomer goes
    assert sorted(r.team for r in queue.take(10)) == ["a", "a", "b"]


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="capacity"):
        TenantQueue(0)
