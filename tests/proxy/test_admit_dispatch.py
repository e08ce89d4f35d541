"""The admit stage holding borrowers while the pool is full: claimed again at dispatch."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.proxy.stages import PRICES, Stages, exchange, served

from fairgate.admission import CapacityTracker
from fairgate.core.clock import Clock, SystemClock
from fairgate.core.errors import GatewayTimeout
from fairgate.core.principal import Principal
from fairgate.core.replica import ReplicaSnapshot
from fairgate.fairshare import FairShare
from fairgate.limits import BudgetBook, Limiter
from fairgate.proxy.dispatch import Dispatcher, PoolEngines
from fairgate.proxy.exchange import Exchange
from fairgate.proxy.ticket import Ticket
from fairgate.state import MemoryCounterStore, RedisCounterStore


class StillClock:
    """Time that does not move: decay weighs every charge alike."""

    def wall(self) -> float:
        return 1_000_000.0

    def monotonic(self) -> float:
        return 1000.0


A = Principal("ka", "a", "ta")
B = Principal("kb", "b", "tb")


class Pool:
    """The stages over pool p (C = 4, reservations a 2 / b 2) and one engine that runs four at
    once, keeping ``depth`` waiting beyond them (0 unless told); ``in_flight`` is what the
    registry would count."""

    def __init__(
        self,
        state: Any,
        *,
        hold: bool = True,
        queue_ttl: float = 30.0,
        depth: int = 0,
        clock: Clock | None = None,
    ) -> None:
        self.in_flight = 0
        clock = clock or SystemClock()
        self.dispatcher = Dispatcher(
            {"p": PoolEngines(self.snapshots, CapacityTracker(4, probe_fraction=0))},
            ranks=lambda pool, orgs: self.gate.ranks_now(pool, orgs),
            clock=clock,
            queue_size=100,
            queue_ttl=queue_ttl,
            depth=depth,
        )
        self.gate = Stages(
            limiter=Limiter(state),
            budgets=BudgetBook,
            prices=PRICES,
            pools={"m": "p"},
            classes={"m": "interactive"},
            clock=clock,
            fairshare=FairShare({"p": 4}, {"p": {"a": 0.5, "b": 0.5}}),
            fairshare_state=state,
            dispatcher=self.dispatcher if hold else None,
        )

    def snapshots(self) -> list[ReplicaSnapshot]:
        running = min(self.in_flight, 4)
        return [
            ReplicaSnapshot(
                "e1",
                "m",
                in_flight=self.in_flight,
                running=float(running),
                waiting=float(self.in_flight - running),
            )
        ]

    async def send(self, who: Principal) -> tuple[Ticket, Exchange]:
        """Enter the stages and reach the engine (what the pipeline does after ``enter``)."""
        ex = exchange(who)
        ticket = await self.gate.enter(ex)
        self.in_flight += 1
        ticket.dispatched()
        return ticket, ex

    async def finish(self, sent: tuple[Ticket, Exchange], completion: int = 100) -> None:
        ticket, ex = sent
        self.in_flight -= 1
        await self.gate.leave(ticket, served(ex, 100, completion))


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_within_share_never_waits_borrowers_wait_and_go_by_the_rank_at_dispatch() -> None:
    pool = Pool(MemoryCounterStore())
    a1, a2 = await pool.send(A), await pool.send(A)  # a's two reserved seats
    a3, a4 = await pool.send(A), await pool.send(A)  # borrowing: the engine has room
    assert [t.within_share for t, _ in (a1, a2, a3, a4)] == [True, True, False, False]
    assert a3[0].grant is not None and a3[0].held == 0.0
    # The engine is full; b's reserved seats are still b's: never held.
    b1 = await asyncio.wait_for(pool.send(B), 1)
    assert b1[0].within_share and b1[0].priority == 0
    b2 = await asyncio.wait_for(pool.send(B), 1)
    a5 = asyncio.create_task(pool.send(A))  # borrows: held, first in line
    await settle()
    b3 = asyncio.create_task(pool.send(B))  # borrows: held, second
    await settle()
    assert pool.dispatcher.held("p") == 2 and not a5.done() and not b3.done()
    # a's borrowers finish, and a has now used the pool a lot: b ranks first.
    await pool.finish(a3, completion=5000)
    await pool.finish(a4, completion=5000)
    assert pool.dispatcher.held("p") == 2  # six were in flight on a batch of four
    # a within-share request of a ends: room for one, and it goes to b (rank 0), not to
    # a's earlier borrower; then a's freed seat goes to a's borrower, within share.
    await pool.finish(a1)
    ticket_b3, _ = await asyncio.wait_for(b3, 1)
    assert ticket_b3.within_share is False
    assert ticket_b3.rank == 0 and ticket_b3.priority == 10
    assert ticket_b3.held > 0
    ticket_a5, _ = await asyncio.wait_for(a5, 1)
    assert ticket_a5.within_share is True and ticket_a5.priority == 0
    assert pool.gate.fairshare_counts()[("p", "a")] == (2, 0)
    for sent in (a2, b1, b2, (ticket_b3, _), (ticket_a5, _)):
        await pool.finish(sent)
    assert pool.gate.fairshare_counts() == {("p", "a"): (0, 0), ("p", "b"): (0, 0)}
    assert pool.dispatcher.held("p") == 0


async def test_a_borrower_let_go_for_a_seat_another_request_took_waits_again() -> None:
    # A seat of a frees and its held borrower is let go, room or not, to take it; a's
    # next request takes it first (as an organisation abandoning streams and sending
    # again at once does). Sent as a borrower into the full pool, it would pass b's
    # better-ranked borrower held; it waits again instead.
    pool = Pool(MemoryCounterStore())
    a1, a2 = await pool.send(A), await pool.send(A)  # a's two reserved seats
    a3, a4 = await pool.send(A), await pool.send(A)  # borrowing: the engine is full now
    b1, b2 = await pool.send(B), await pool.send(B)  # b's reserved seats: never held
    a5 = asyncio.create_task(pool.send(A))  # borrows: held
    await settle()
    b3 = asyncio.create_task(pool.send(B))  # borrows: held behind it
    await settle()
    assert pool.dispatcher.held("p") == 2
    await pool.finish(a1)  # a's seat frees: a5 is let go for it ...
    a6 = await pool.send(A)  # ... and a's next request takes it first, before a5 runs
    assert a6[0].within_share is True
    await settle()
    assert not a5.done() and not b3.done()
    assert pool.dispatcher.held("p") == 2  # a5 waits again; nothing entered the full pool
    assert pool.in_flight == 6
    for sent in (a2, a3, a4, b1, b2, a6):
        await pool.finish(sent)
    for task in (a5, b3):
        await pool.finish(await asyncio.wait_for(task, 1))
    assert pool.gate.fairshare_counts() == {("p", "a"): (0, 0), ("p", "b"): (0, 0)}
    assert pool.dispatcher.held("p") == 0


async def test_a_borrower_that_waits_again_keeps_its_turn_before_later_ones() -> None:
    # a5 is let go for a freed seat of a that a's next request takes first, so it waits
    # again; a's later borrower a7 was held meanwhile. The next seat of a must go to
    # a5, the earlier arrival, not to a7: waiting again must not cost a5 its turn.
    pool = Pool(MemoryCounterStore())
    a1, a2 = await pool.send(A), await pool.send(A)  # a's two reserved seats
    a3, a4 = await pool.send(A), await pool.send(A)  # borrowing: the engine is full now
    b1, b2 = await pool.send(B), await pool.send(B)  # b's reserved seats: never held
    a5 = asyncio.create_task(pool.send(A))  # borrows: held, a's first
    await settle()
    a7 = asyncio.create_task(pool.send(A))  # borrows: held, a's second
    await settle()
    assert pool.dispatcher.held("p", "a") == 2
    await pool.finish(a1)  # a's seat frees: a5 is let go for it ...
    a6 = await pool.send(A)  # ... and a's next request takes it first
    assert a6[0].within_share is True
    await settle()
    assert not a5.done() and not a7.done()  # a5 waits again
    await pool.finish(a2)  # a's other seat frees: a's earliest held borrower takes it
    await settle()
    assert a5.done() and not a7.done()
    ticket_a5, ex_a5 = a5.result()
    assert ticket_a5.within_share is True
    for sent in (a3, a4, b1, b2, a6, (ticket_a5, ex_a5)):
        await pool.finish(sent)
    await pool.finish(await asyncio.wait_for(a7, 1))
    assert pool.gate.fairshare_counts() == {("p", "a"): (0, 0), ("p", "b"): (0, 0)}
    assert pool.dispatcher.held("p") == 0


async def test_a_borrower_that_waits_again_still_waits_at_most_the_queue_ttl() -> None:
    # queue_ttl bounds a request's whole wait in the gateway from its arrival: waiting
    # again after a grant it could not use does not restart the clock.
    ttl = 0.4
    pool = Pool(MemoryCounterStore(), queue_ttl=ttl)
    loop = asyncio.get_running_loop()
    a1 = await pool.send(A)
    sent = [await pool.send(A) for _ in range(3)]  # a's other seat, two borrowers: full
    b1, b2 = await pool.send(B), await pool.send(B)
    arrived = loop.time()
    a5 = asyncio.create_task(pool.send(A))  # borrows: held
    await settle()
    await asyncio.sleep(ttl / 2)
    await pool.finish(a1)  # a's seat frees: a5 is let go for it ...
    a6 = await pool.send(A)  # ... and a's next request takes it first: a5 waits again
    await settle()
    assert not a5.done()
    await asyncio.sleep(arrived + ttl + 0.05 - loop.time())
    pool.dispatcher.recheck()  # what the dispatcher's loop does every recheck_interval
    await settle()
    assert a5.done()  # answered 504 within the TTL of its arrival, not half a TTL later
    try:
        a5.result()
    except GatewayTimeout as exc:
        assert exc.code == "queue_timeout"
    else:
        raise AssertionError("a5 was served")
    assert pool.dispatcher.held("p") == 0
    for one in (*sent, b1, b2, a6):
        await pool.finish(one)
    assert pool.gate.fairshare_counts() == {("p", "a"): (0, 0), ("p", "b"): (0, 0)}


async def test_with_the_switch_off_every_borrower_goes_at_once_with_its_rank_of_arrival() -> None:
    pool = Pool(MemoryCounterStore(), hold=False)
    sent = [await asyncio.wait_for(pool.send(A), 1) for _ in range(8)]
    assert pool.in_flight == 8
    assert all(t.grant is None for t, _ in sent)
    for one in sent:
        await pool.finish(one)


async def test_a_held_borrower_whose_client_leaves_holds_nothing() -> None:
    pool = Pool(MemoryCounterStore())
    sent = [await pool.send(A) for _ in range(4)]
    gone = asyncio.create_task(pool.send(A))
    await settle()
    assert pool.dispatcher.held("p") == 1
    gone.cancel()
    await settle()
    assert pool.dispatcher.held("p") == 0
    assert pool.gate.fairshare_counts()[("p", "a")] == (2, 2)  # the four sent, nothing else
    for one in sent:
        await pool.finish(one)


async def test_with_the_state_back_end_down_borrowers_go_at_once_as_before() -> None:
    # nothing listens on port 1: every call fails fast, the claim cannot prove a seat
    state = RedisCounterStore("redis://127.0.0.1:1/0", prefix="fg-test:dispatch-down:", timeout=0.2)
    try:
        pool = Pool(state)
        for _ in range(6):
            ticket, _ = await asyncio.wait_for(pool.send(A), 5)
            assert ticket.within_share is False and ticket.grant is None
        assert pool.dispatcher.held("p") == 0
    finally:
        await state.aclose()


async def test_ranks_count_what_each_organisation_has_running_now() -> None:
    # A rank that waited for requests to finish before it moved would let one
    # organisation's borrowers take every freed seat for a request's lifetime.
    pool = Pool(MemoryCounterStore())
    a1, a2, a3 = await pool.send(A), await pool.send(A), await pool.send(A)
    b1 = await pool.send(B)
    await pool.finish(b1, completion=120)
    await pool.finish(a3, completion=100)  # a has used less than b so far ...
    assert pool.gate.ranks_now("p", [("a", ""), ("b", "")]) == {
        ("a", ""): 1,
        ("b", ""): 0,
    }  # ... but runs two more
    await pool.finish(a1, completion=100)
    await pool.finish(a2, completion=100)
    assert pool.gate.ranks_now("p", [("a", ""), ("b", "")]) == {
        ("a", ""): 1,
        ("b", ""): 0,
    }  # and used them


async def test_a_borrower_waiting_in_the_engine_counts_toward_its_rank() -> None:
    # The engine runs four and keeps two waiting (depth 2). a's two borrowers wait in
    # the engine behind the four running within-share requests; they will run next
    # and be charged. b has used more so far, but less than a will have once they
    # ran: b's held borrower goes first, though a's was held before it. Counting
    # only the four the engine can run would send a's first, and a would overshoot.
    pool = Pool(MemoryCounterStore(), depth=2, clock=StillClock())
    seated = [await pool.send(A), await pool.send(A), await pool.send(B), await pool.send(B)]
    a3, b3 = await pool.send(A), await pool.send(B)  # borrowers: room for two
    await pool.finish(a3, completion=100)
    await pool.finish(b3, completion=388)  # b has used about 1.9 requests more than a
    a4, a5 = await pool.send(A), await pool.send(A)  # go at once, wait in the engine
    assert pool.in_flight == 6 and pool.snapshots()[0].waiting == 2
    a6 = asyncio.create_task(pool.send(A))  # held first
    await settle()
    b4 = asyncio.create_task(pool.send(B))  # held second
    await settle()
    assert pool.dispatcher.held("p") == 2
    await pool.finish(a4, completion=100)  # room for one
    await settle()
    assert b4.done() and not a6.done()
    for sent in (*seated, a5, b4.result()):
        await pool.finish(sent)
    await pool.finish(await asyncio.wait_for(a6, 1))
    assert pool.gate.fairshare_counts() == {("p", "a"): (0, 0), ("p", "b"): (0, 0)}
