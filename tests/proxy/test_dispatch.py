"""The dispatcher holds borrowers while their pool has no room, lets the best go as seats free."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Collection, Mapping

import pytest

from fairgate.admission import CapacityTracker
from fairgate.core.errors import GatewayTimeout, ServiceUnavailable
from fairgate.core.replica import ReplicaSnapshot
from fairgate.proxy.dispatch import Dispatcher, Grant, OtherGateways, PoolEngines, room


class Clock:
    """Time that moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def wall(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now


class Engine:
    """One replica as the registry would show it: this gateway's in-flight count and a
    scrape as fresh as can be (a batch of ``batch``, the rest waiting); ``scraped`` False:
    its load is unknown."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.batch = 4
        self.scraped = True
        self.healthy = True

    def snapshots(self) -> list[ReplicaSnapshot]:
        running = min(self.in_flight, self.batch)
        return [
            ReplicaSnapshot(
                "e1",
                "m",
                healthy=self.healthy,
                in_flight=self.in_flight,
                running=float(running) if self.scraped else None,
                waiting=float(self.in_flight - running) if self.scraped else None,
            )
        ]


def dispatcher(
    engine: Engine,
    clock: Clock,
    ranks: dict[str, int] | None = None,
    *,
    queue_size: int = 10,
    depth: int = 0,
) -> Dispatcher:
    current = ranks if ranks is not None else {}

    def rank_of(pool: str, owners: Collection[tuple[str, str]]) -> Mapping[tuple[str, str], int]:
        return {owner: current.get(owner[0], 0) for owner in owners}

    return Dispatcher(
        {"p": PoolEngines(engine.snapshots, CapacityTracker(4, probe_fraction=0))},
        ranks=rank_of,
        clock=clock,
        queue_size=queue_size,
        queue_ttl=30.0,
        depth=depth,
    )


def sent(engine: Engine, grant: Grant) -> None:
    """The pipeline's part: the request reaches the replica."""
    engine.in_flight += 1
    grant.dispatched()


def finished(engine: Engine, d: Dispatcher, grant: Grant) -> None:
    engine.in_flight -= 1
    grant.release()
    d.freed("p")


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


def test_room_is_batch_plus_depth_minus_what_is_there() -> None:
    snap = ReplicaSnapshot("e1", "m", in_flight=30, running=33.0, waiting=2.0)
    assert room([snap], {"m/e1": 32.0}, 0) == 32 + 8 - 30  # automatic depth: a quarter
    assert room([snap], {"m/e1": 32.0}, 3, depth=2, others={"m/e1": 5.0}) == 32 + 2 - 30 - 5 - 3
    # no load known at all, or no replica able to take traffic: nothing is held on a guess
    unknown = ReplicaSnapshot("e2", "m", in_flight=50)
    assert room([unknown], {"m/e2": 32.0}, 0) == math.inf
    # one replica's scrape gone stale among known ones: it counts at its seats less this
    # gateway's requests there, not as endless room that lets every held borrower go
    assert room([snap, unknown], {"m/e1": 32.0, "m/e2": 32.0}, 0) == (32 + 8 - 30) + (32 + 8 - 50)
    down = ReplicaSnapshot("e1", "m", healthy=False, in_flight=99, running=1.0)
    assert room([down], {}, 0) == math.inf
    assert room([down, snap], {"m/e1": 32.0}, 0, depth=0) == 2


def test_other_gateways_count_from_each_new_scrape_only() -> None:
    others = OtherGateways()
    others.observe([ReplicaSnapshot("e1", "m", in_flight=10, running=12.0, waiting=4.0)])
    assert others.counts() == {"m/e1": 6.0}
    # the same scrape seen later, with this gateway's own count grown: still 6
    others.observe([ReplicaSnapshot("e1", "m", in_flight=16, running=12.0, waiting=4.0)])
    assert others.counts() == {"m/e1": 6.0}
    others.observe([ReplicaSnapshot("e1", "m", in_flight=16, running=14.0, waiting=1.0)])
    assert others.counts() == {"m/e1": 0.0}


async def test_a_borrower_goes_at_once_while_there_is_room_and_waits_when_there_is_none() -> None:
    engine, clock = Engine(), Clock()
    d = dispatcher(engine, clock)
    grants = []
    for _ in range(4):
        grant = d.grant_now("p")
        assert grant is not None
        sent(engine, grant)
        grants.append(grant)
    assert d.grant_now("p") is None  # four in flight on a batch of four, depth 0
    waiting = asyncio.create_task(d.wait("p", "a", 0))
    await settle()
    assert d.held("p") == 1 and not waiting.done()
    finished(engine, d, grants[0])
    grant = await asyncio.wait_for(waiting, 1)
    assert grant.waited == 0.0 and grant.pending and d.held("p") == 0


async def test_a_pending_grant_counts_until_the_request_reaches_a_replica() -> None:
    engine, clock = Engine(), Clock()
    d = dispatcher(engine, clock)
    grants = [d.grant_now("p") for _ in range(4)]
    assert all(g is not None for g in grants)
    assert d.grant_now("p") is None  # none reached the engine yet: all four pending
    waiting = asyncio.create_task(d.wait("p", "a", 0))
    await settle()
    first = grants[0]
    assert first is not None
    first.release()  # it failed before any replica: its room goes to the held one
    await asyncio.wait_for(waiting, 1)


async def test_held_borrowers_go_by_the_rank_their_organisation_has_when_a_seat_frees() -> None:
    engine, clock = Engine(), Clock()
    ranks = {"a": 0, "b": 1}
    d = dispatcher(engine, clock, ranks)
    running = []
    for _ in range(4):
        grant = d.grant_now("p")
        assert grant is not None
        sent(engine, grant)
        running.append(grant)
    order: list[str] = []

    async def borrower(org: str) -> None:
        grant = await d.wait("p", org, 0)
        order.append(org)
        sent(engine, grant)

    tasks = [asyncio.create_task(borrower(org)) for org in ("a", "b", "a", "b")]
    await settle()
    # b's borrowers arrived second and fourth; by the time seats free, b ranks first
    ranks.update(a=1, b=0)
    finished(engine, d, running.pop())
    await settle()
    finished(engine, d, running.pop())
    await settle()
    assert order == ["b", "b"]
    ranks.update(a=0, b=1)
    finished(engine, d, running.pop())
    finished(engine, d, running.pop())
    await asyncio.wait_for(asyncio.gather(*tasks), 1)
    assert order == ["b", "b", "a", "a"]


async def test_a_freed_reserved_seat_lets_its_organisations_borrower_go_room_or_not() -> None:
    engine, clock = Engine(), Clock()
    d = dispatcher(engine, clock, {"a": 1, "b": 0})
    engine.in_flight = 4
    b = asyncio.create_task(d.wait("p", "b", 0))
    a = asyncio.create_task(d.wait("p", "a", 0))
    await settle()
    d.seat_freed("p", "a")  # a within-share request of a ended: a's own borrower takes it
    await asyncio.wait_for(a, 1)
    assert not b.done() and d.held("p", "b") == 1
    d.seat_freed("p", "c")  # nothing held of c: nothing happens
    assert d.held("p") == 1
    b.cancel()


async def test_the_queue_is_bounded_in_size_and_time() -> None:
    engine, clock = Engine(), Clock()
    engine.in_flight = 4
    d = dispatcher(engine, clock, queue_size=2)
    held = [asyncio.create_task(d.wait("p", "a", 0)) for _ in range(2)]
    await settle()
    with pytest.raises(ServiceUnavailable) as full:
        await d.wait("p", "a", 0)
    assert full.value.status == 503 and full.value.code == "queue_full"
    clock.now += 31
    d.recheck()
    for task in held:
        with pytest.raises(GatewayTimeout) as late:
            await asyncio.wait_for(task, 1)
        assert late.value.status == 504 and late.value.code == "queue_timeout"
    assert d.held("p") == 0


async def test_a_flooding_organisation_gives_way_in_a_full_queue() -> None:
    engine, clock = Engine(), Clock()
    engine.in_flight = 4
    d = dispatcher(engine, clock, queue_size=4)
    flood = [asyncio.create_task(d.wait("p", "a", 0)) for _ in range(4)]
    await settle()
    # b's borrower takes the place of a's newest, which is refused at once
    b_first = asyncio.create_task(d.wait("p", "b", 0))
    await settle()
    with pytest.raises(ServiceUnavailable) as refused:
        await asyncio.wait_for(flood[3], 1)
    assert refused.value.status == 503 and refused.value.code == "queue_full"
    assert d.held("p", "a") == 3 and d.held("p", "b") == 1
    # a's next borrower finds the queue full and a already holding the most
    with pytest.raises(ServiceUnavailable):
        await d.wait("p", "a", 0)
    b_second = asyncio.create_task(d.wait("p", "b", 0))
    await settle()
    assert d.held("p", "a") == 2 and d.held("p", "b") == 2
    # split evenly: the next of b is refused itself, a keeps its two
    with pytest.raises(ServiceUnavailable):
        await d.wait("p", "b", 0)
    assert d.held("p", "a") == 2 and d.held("p", "b") == 2
    for task in (*flood[:3], b_first, b_second):
        task.cancel()
    await asyncio.gather(*flood[:3], b_first, b_second, return_exceptions=True)


async def test_a_caller_who_goes_away_leaves_the_queue_at_once_and_holds_nothing() -> None:
    engine, clock = Engine(), Clock()
    engine.in_flight = 4
    d = dispatcher(engine, clock)
    gone = asyncio.create_task(d.wait("p", "a", 0))
    stays = asyncio.create_task(d.wait("p", "b", 0))
    await settle()
    gone.cancel()
    await settle()
    assert d.held("p") == 1 and d.held("p", "a") == 0
    engine.in_flight = 3
    d.freed("p")
    grant = await asyncio.wait_for(stays, 1)
    assert grant.pending


async def test_an_engine_whose_load_is_unknown_holds_nothing() -> None:
    engine, clock = Engine(), Clock()
    engine.in_flight = 40
    engine.scraped = False  # no fresh scrape
    d = dispatcher(engine, clock)
    assert d.grant_now("p") is not None
    engine.scraped, engine.healthy = True, False  # the only replica is down: routing answers
    assert d.grant_now("p") is not None


async def test_one_replica_s_stale_scrape_does_not_let_every_held_borrower_go() -> None:
    # Two engines of four seats, full; five borrowers held. The second engine's scrape
    # goes stale (a slow /metrics) while it keeps serving: before, the pool's room became
    # endless and all five went at once, at the ranks of that moment, onto full engines.
    one, two, clock = Engine(), Engine(), Clock()

    def both() -> list[ReplicaSnapshot]:
        return [*one.snapshots(), dataclasses.replace(two.snapshots()[0], name="e2")]

    d = Dispatcher(
        {"p": PoolEngines(both, CapacityTracker(4, probe_fraction=0))},
        ranks=lambda pool, owners: dict.fromkeys(owners, 0),
        clock=clock,
        queue_size=10,
        queue_ttl=30.0,
        depth=0,
    )
    grants = []
    for engine in (one, one, one, one, two, two, two, two):
        grant = d.grant_now("p")
        assert grant is not None
        sent(engine, grant)
        grants.append(grant)
    held = [asyncio.create_task(d.wait("p", "a", 0)) for _ in range(5)]
    await settle()
    assert d.held("p") == 5
    two.scraped = False
    d.recheck()
    await settle()
    assert d.held("p") == 5  # the stale engine counts at its seats, all taken
    finished(two, d, grants[-1])  # a seat frees there: one borrower goes, not five
    await settle()
    assert d.held("p") == 4 and sum(t.done() for t in held) == 1
    for task in held:
        task.cancel()
    await asyncio.gather(*held, return_exceptions=True)


async def test_the_batch_capacity_is_learned_from_the_engine() -> None:
    engine, clock = Engine(), Clock()
    d = dispatcher(engine, clock)
    engine.in_flight, engine.batch = 6, 6  # the engine runs six at once: capacity 6
    assert d.room("p") == 0
    engine.in_flight = 5
    assert d.room("p") == 1
