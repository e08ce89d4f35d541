"""Reclaim (``proxy.reclaim``): when borrowers are preempted for an owner's waiting requests,
and which ones."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from fairgate.auth import invalid_credential
from fairgate.proxy.exchange import Exchange
from fairgate.proxy.reclaim import Attempt, Reclaimer, choose

AFTER = 2.0


def _borrower(
    order: int, priority: int = 20, *, started: bool = True, stream: bool = True
) -> Attempt:
    return Attempt(order, 0.0, False, stream, priority, "p", "H", started=started)


def _owner(order: int, at: float = 0.0, *, started: bool = False, stream: bool = True) -> Attempt:
    return Attempt(order, at, True, stream, 0, "p", "A", started=started)


def _orders(attempts: list[Attempt]) -> list[int]:
    return [a.order for a in attempts]


# -- the victims ---------------------------------------------------------------------


def test_the_victims_are_the_largest_priority_then_the_youngest_as_vllm_picks() -> None:
    borrowers = [_borrower(1, 20), _borrower(2, 30), _borrower(3, 20), _borrower(4, 11)]
    owners = [_owner(10), _owner(11)]
    victims, starved = choose([*borrowers, *owners], 4, 5.0, 10.0, AFTER)
    # rank 2 (priority 30) first, then the youngest of priority 20
    assert _orders(victims) == [2, 3]
    assert _orders(starved) == [10, 11]


def test_only_as_many_as_the_waiting_owners_need() -> None:
    borrowers = [_borrower(i) for i in range(8)]
    victims, _ = choose([*borrowers, _owner(10)], 8, 5.0, 10.0, AFTER)
    assert _orders(victims) == [7]


def test_no_more_than_the_seats_overbooked() -> None:
    # 2 owners wait but 7 seats of 8 are used by borrowers and 1 is free: one victim
    borrowers = [_borrower(i) for i in range(7)]
    victims, _ = choose([*borrowers, _owner(10), _owner(11)], 8, 5.0, 10.0, AFTER)
    assert _orders(victims) == [6]
    # none overbooked: the engine takes the owners as the seats allow
    assert choose([*borrowers[:6], _owner(10), _owner(11)], 8, 5.0, 10.0, AFTER) == ([], [])


def test_no_more_than_the_engine_says_are_waiting() -> None:
    borrowers = [_borrower(i) for i in range(8)]
    owners = [_owner(10 + i) for i in range(4)]
    victims, _ = choose([*borrowers, *owners], 8, 2.0, 10.0, AFTER)
    assert len(victims) == 2


def test_a_borrower_stream_waiting_for_its_first_event_is_no_victim() -> None:
    # it holds no running seat: aborting it frees nothing
    waiting = [_borrower(1, 90, started=False), _borrower(2, 90, started=False)]
    running = [_borrower(3, 20)]
    victims, _ = choose([*waiting, *running, _owner(10), _owner(11)], 1, 4.0, 10.0, AFTER)
    assert _orders(victims) == [3]
    assert choose([*waiting, _owner(10)], 1, 3.0, 10.0, AFTER) == ([], [])


def test_a_plain_borrower_may_be_a_victim() -> None:
    # its start cannot be seen: it may hold a running seat
    victims, _ = choose([_borrower(1, stream=False), _owner(10)], 1, 1.0, 10.0, AFTER)
    assert _orders(victims) == [1]


def test_queued_plain_borrowers_do_not_shield_the_running_ones() -> None:
    """The dispatcher keeps the youngest borrowers queued in the engine: taken youngest
    first, plain borrowers were preempted without freeing a seat, the dispatcher sent the
    next, and the owner starved for as long as the borrower kept sending."""
    plain = [_borrower(i, stream=False) for i in range(1, 7)]  # 1-4 run, 5-6 queued
    victims, _ = choose([*plain, _owner(10)], 4, 3.0, 10.0, AFTER)
    assert _orders(victims) == [1]  # the oldest: the likeliest to hold a seat
    # within one priority, a running stream goes before any plain request
    streams = [_borrower(7), _borrower(8)]
    victims, _ = choose([*plain, *streams, _owner(10), _owner(11)], 6, 4.0, 10.0, AFTER)
    assert _orders(victims) == [8, 7]
    # the worst priority still goes first, whatever its kind
    worse = _borrower(9, 30, stream=False)
    victims, _ = choose([*streams, worse, _owner(10)], 2, 2.0, 10.0, AFTER)
    assert _orders(victims) == [9]


def test_a_borrower_sent_without_priority_ranks_last() -> None:
    borrowers = [_borrower(1, 100), Attempt(2, 0.0, False, True, None, "p", "H", started=True)]
    victims, _ = choose([*borrowers, _owner(10)], 2, 1.0, 10.0, AFTER)
    assert _orders(victims) == [2]


# -- the trigger ---------------------------------------------------------------------


def test_nothing_while_the_owners_requests_run() -> None:
    # an engine with headroom (--max-num-seqs above the seats): the owners' streams
    # have their first events, borrowers overbook the seats and nothing is preempted
    borrowers = [_borrower(i) for i in range(8)]
    owners = [_owner(10 + i, started=True) for i in range(4)]
    assert choose([*borrowers, *owners], 8, None, 10.0, AFTER) == ([], [])
    assert choose([*borrowers, *owners], 8, 3.0, 10.0, AFTER) == ([], [])


def test_a_plain_owner_never_counts_as_starved() -> None:
    """Its start cannot be seen: a plain owner request that simply ran longer than
    reclaim_after, beside the borrowers the dispatcher keeps queued in the engine (so its
    waiting count stays above 0), had a borrower preempted every reclaim_after."""
    borrowers = [_borrower(i, stream=False) for i in range(8)]
    owners = [_owner(10, stream=False), _owner(11, stream=False)]
    assert choose([*borrowers, *owners], 8, 2.0, 10.0, AFTER) == ([], [])
    assert choose([*borrowers, *owners], 8, 0.0, 10.0, AFTER) == ([], [])


def test_nothing_while_the_engine_has_nothing_waiting_beyond_our_queued_borrowers() -> None:
    running = [_borrower(i) for i in range(8)]
    queued = [_borrower(20 + i, 90, started=False) for i in range(2)]
    owner = _owner(10)
    # the engine's two waiting requests are this gateway's queued borrowers: the owner's
    # stream runs (a long prefill), nothing waits for a seat on its behalf
    assert choose([*running, *queued, owner], 8, 2.0, 10.0, AFTER) == ([], [])
    assert choose([*running, owner], 8, 0.0, 10.0, AFTER) == ([], [])
    victims, _ = choose([*running, *queued, owner], 8, 3.0, 10.0, AFTER)
    assert _orders(victims) == [7]


def test_nothing_before_the_owner_waited_reclaim_after() -> None:
    borrowers = [_borrower(i) for i in range(8)]
    assert choose([*borrowers, _owner(10, at=9.0)], 8, 1.0, 10.0, AFTER) == ([], [])
    assert _orders(choose([*borrowers, _owner(10, at=8.0)], 8, 1.0, 10.0, AFTER)[0]) == [7]


def test_nothing_when_the_engine_load_is_unknown() -> None:
    """Without a fresh scrape (an engine without metrics, a stale one, a replica of learned
    capacity gone quiet) nothing says the owner's requests are queued."""
    borrowers = [_borrower(i) for i in range(8)]
    assert choose([*borrowers, _owner(10), _owner(11)], 8, None, 10.0, AFTER) == ([], [])


def test_nothing_without_borrowers() -> None:
    owners = [_owner(i) for i in range(12)]
    assert choose(owners, 8, 4.0, 10.0, AFTER) == ([], [])


# -- the reclaimer -------------------------------------------------------------------


@dataclass(eq=False)
class _Replica:
    name: str = "r0"
    model: str = "m"
    seats: float | None = 2.0
    waiting: float | None = 1.0

    def engine_waiting(self) -> float | None:
        return self.waiting


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _ex(request_id: str, *, stream: bool = True) -> Exchange:
    return Exchange(
        request_id=request_id, method="POST", path="/v1/chat", started=0.0, stream=stream
    )


async def test_a_victim_is_cancelled_once_and_marked_preempted() -> None:
    clock = _Clock()
    counted: list[tuple[str, str]] = []
    reclaim = Reclaimer(
        AFTER, clock=clock, on_preempt=lambda pool, org: counted.append((pool, org))
    )
    replica = _Replica()
    ran: dict[str, asyncio.Task[None]] = {}

    async def request(ex: Exchange, within: bool, org: str, priority: int) -> None:
        attempt = reclaim.enter(replica, ex, "p", org, within, priority)
        try:
            if not within:
                reclaim.opened(replica, attempt, True)  # its first event came: it runs
            await asyncio.sleep(3600)
        finally:
            reclaim.leave(replica, attempt)

    exes = {name: _ex(name) for name in ("h1", "h2", "a1")}
    for name, within, org, priority in (("h1", False, "H", 10), ("h2", False, "H", 10)):
        ran[name] = asyncio.create_task(request(exes[name], within, org, priority))
    await asyncio.sleep(0)
    clock.now += 1.0
    ran["a1"] = asyncio.create_task(request(exes["a1"], True, "A", 0))
    await asyncio.sleep(0)
    assert reclaim.check() == []  # the owner has not waited long enough
    clock.now += AFTER
    victims = reclaim.check()
    assert [v.ex for v in victims] == [exes["h2"]]  # the youngest borrower
    assert exes["h2"].preempted == 2.0  # Retry-After: reclaim_after, whole seconds
    assert counted == [("p", "H")]
    with pytest.raises(asyncio.CancelledError):
        await ran["h2"]
    # the owner waiting on counts again only after another reclaim_after
    assert reclaim.check() == []
    assert not ran["h1"].done()
    for task in ran.values():
        task.cancel()
    await asyncio.gather(*ran.values(), return_exceptions=True)
    assert reclaim.watching(replica) == ()


async def test_a_request_already_cut_for_its_credential_is_no_victim() -> None:
    clock = _Clock()
    reclaim = Reclaimer(AFTER, clock=clock)
    replica = _Replica(seats=1.0, waiting=1.0)
    cut, owner = _ex("h1"), _ex("a1")
    cut.revoked = invalid_credential()  # being cut by proxy.in_flight, not unwound yet
    hold = asyncio.create_task(asyncio.sleep(3600))
    borrower = reclaim.enter(replica, cut, "p", "H", False, 20)
    assert borrower is not None
    borrower.task, borrower.started = hold, True
    reclaim.enter(replica, owner, "p", "A", True, 0)
    clock.now += AFTER
    assert reclaim.check() == []
    assert cut.preempted is None and not hold.cancelled()
    hold.cancel()
    await asyncio.gather(hold, return_exceptions=True)


async def test_attempts_outside_fair_share_are_not_watched() -> None:
    reclaim = Reclaimer(AFTER)
    assert reclaim.enter(_Replica(), _ex("x"), None, "", True, None) is None
    assert reclaim.enter(_Replica(seats=None), _ex("x"), "p", "A", True, 0) is None


async def test_a_plain_answer_in_hand_is_no_longer_watched() -> None:
    reclaim = Reclaimer(AFTER)
    replica = _Replica()
    attempt = reclaim.enter(replica, _ex("x", stream=False), "p", "H", False, 20)
    assert reclaim.watching(replica) == (attempt,)
    reclaim.opened(replica, attempt, False)
    assert reclaim.watching(replica) == ()


def test_reclaim_after_must_be_positive() -> None:
    with pytest.raises(ValueError, match="after must be > 0"):
        Reclaimer(0)
