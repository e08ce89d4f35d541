"""The admit stage in one process: fair share (and ``GET /me``'s view of it) on a real
memory or Redis back end, after the limit stage as the pipeline runs them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tests.proxy.stages import PRICES, Stages, exchange, served, stages

from fairgate.core.clock import SystemClock
from fairgate.core.errors import ServiceUnavailable
from fairgate.core.principal import Principal
from fairgate.fairshare import FairShare
from fairgate.limits import BudgetBook, Limiter, Limits
from fairgate.state import RedisCounterStore

A = Principal("ka", "a", "ta")
B = Principal("kb", "b", "tb")


async def test_within_share_requests_get_priority_0_then_the_org_borrows(store: Any) -> None:
    g = stages(store, pools=True)
    tickets = [await g.enter(exchange(A)) for _ in range(3)]
    assert [t.priority for t in tickets] == [0, 0, 10]  # reservation of a: 2 of 4
    assert g.fairshare_counts()[("p", "a")] == (2, 1)
    # b has its own reservation whatever a holds
    other = await g.enter(exchange(B))
    assert other.priority == 0
    # a request that ends frees its within-share slot for the next one
    await g.leave(tickets[0], served(exchange(A), 10, 10))
    again = await g.enter(exchange(A))
    assert again.priority == 0
    for t in (tickets[1], tickets[2], other, again):
        await g.leave(t, exchange(A))
    assert g.fairshare_counts()[("p", "a")] == (0, 0)


async def test_a_request_of_several_sequences_borrows_and_holds_no_seat(store: Any) -> None:
    # A seat is one engine sequence. Claimed as one seat, a request with n=8 and 16
    # prompts ran 128 sequences at priority 0 on it, ahead of every other organisation.
    g = stages(store, pools=True)
    several = exchange(A)
    several.sequences = 8
    wide = await g.enter(several)
    assert wide.priority == 10 and wide.borrowing  # a's reservation (2 seats) untouched
    assert g.fairshare_counts()[("p", "a")] == (0, 1)
    seated = [await g.enter(exchange(A)) for _ in range(2)]
    assert [t.priority for t in seated] == [0, 0]  # its seats are still its own
    for t in (wide, *seated):
        await g.leave(t, exchange(A))
    assert g.fairshare_counts()[("p", "a")] == (0, 0)


async def test_usage_is_charged_when_a_request_ends_and_ranks_the_borrower(store: Any) -> None:
    g = stages(store, pools=True)
    ticket = await g.enter(exchange(A))
    await g.leave(ticket, served(exchange(A), 1_000_000, 0))  # 1 GPU-hour at 1/Mtok
    usage = await store.usage("p", SystemClock().wall(), 3600.0)
    assert usage["a"] == pytest.approx(1.0, rel=1e-3)
    # with its reservation full, a borrows behind b, which has used nothing
    held = [await g.enter(exchange(A)) for _ in range(2)]
    held_b = [await g.enter(exchange(B)) for _ in range(2)]
    await asyncio.sleep(1.1)  # past the usage cache
    borrower_a = await g.enter(exchange(A))
    borrower_b = await g.enter(exchange(B))
    assert borrower_b.priority is not None and borrower_a.priority is not None
    assert borrower_b.priority < borrower_a.priority
    for t in [*held, *held_b, borrower_a, borrower_b]:
        await g.leave(t, exchange(A))


async def test_a_team_uses_its_sub_reservation_then_its_orgs_idle_seats_then_the_pool(
    store: Any,
) -> None:
    # a: reservation 4 of 8, split ta 2 / tx 2
    policy = FairShare(
        {"p": 8}, {"p": {"a": 0.5, "b": 0.5}}, team_shares={"a": {"ta": 0.5, "tx": 0.5}}
    )
    g = Stages(
        limiter=Limiter(store),
        budgets=lambda: BudgetBook(()),
        prices=PRICES,
        pools={"m": "p"},
        classes={"m": "interactive"},
        clock=SystemClock(),
        fairshare=policy,
        fairshare_state=store,
    )
    tickets = [await g.enter(exchange(A)) for _ in range(5)]
    assert [t.priority for t in tickets] == [0, 0, 2, 2, 10]  # own, tx's idle seats, pool
    assert [t.within_share for t in tickets] == [True] * 4 + [False]
    # tx comes back: within its own sub-reservation although a's four seats are held
    sibling = Principal("kx", "a", "tx")
    back = [await g.enter(exchange(sibling)) for _ in range(3)]
    assert [t.priority for t in back] == [0, 0, 10]
    # the request is charged to its team as well as to its organisation
    await g.leave(tickets[0], served(exchange(A), 1_000_000, 0))
    now = SystemClock().wall()
    assert (await store.usage("p", now, 3600.0))["a"] == pytest.approx(1.0, rel=1e-3)
    assert (await store.team_usage("p", now, 3600.0))["a"] == {"ta": pytest.approx(1.0, rel=1e-3)}
    for t in [*tickets[1:], *back]:
        await g.leave(t, exchange(A))
    assert g.fairshare_counts()[("p", "a")] == (0, 0)


async def test_the_state_back_end_down_fails_closed_and_borrows_for_fair_share() -> None:
    down = RedisCounterStore("redis://127.0.0.1:1", timeout=0.2)
    try:
        limited = Principal("k1", "a", "ta", limits=Limits(rpm=10))
        with pytest.raises(ServiceUnavailable, match="unavailable"):
            await stages(down).enter(exchange(limited))
        # fair share alone: served, at the lowest borrowing priority (101 for batch,
        # 100 for interactive), never within a reservation it cannot prove
        ticket = await stages(down, pools=True).enter(exchange(A))
        assert ticket.priority == 100
        # a request of several sequences too, though it never asks the state to claim
        g = stages(down, pools=True)
        wide = exchange(A)
        wide.sequences = 4
        assert (await g.enter(wide)).priority == 100
        wide_again = exchange(A)
        wide_again.sequences = 4
        assert (await g.enter(wide_again)).priority == 100  # the state known down now
    finally:
        await down.aclose()


async def test_me_shows_the_orgs_fair_share_standing_in_each_pool_its_key_uses(
    store: Any,
) -> None:
    g = stages(store, pools=True)
    # a spends (usage ranks it behind b), then holds its 2 reserved seats and borrows one
    first = await g.enter(exchange(A))
    await g.leave(first, served(exchange(A), 100, 100))
    tickets = [await g.enter(exchange(A)) for _ in range(3)]
    standing = (await g.standing(A))["fairshare"]
    assert [{k: v for k, v in row.items() if k not in ("usage", "level")} for row in standing] == [
        {
            "pool": "p",
            "share": 0.5,
            "reservation": 2,
            "within_share_in_flight": 2,
            "rank": 1,
            "this_gateway": {"within_share_in_flight": 2, "borrowing_in_flight": 1},
        }
    ]
    assert standing[0]["usage"] > 0 and standing[0]["level"] > 0
    other = (await g.standing(B))["fairshare"]
    assert other[0]["rank"] == 0 and other[0]["level"] is None  # no usage: LF = +inf
    assert other[0]["within_share_in_flight"] == 0
    # a key restricted to models outside every pool has no fair-share section
    assert (await g.standing(Principal("kc", "a", "ta", models=frozenset({"x"}))))[
        "fairshare"
    ] == []
    for ticket in tickets:
        await g.leave(ticket, exchange(A))


async def test_me_answers_503_while_the_fair_share_state_is_down() -> None:
    down = RedisCounterStore("redis://127.0.0.1:1", timeout=0.2)
    try:
        with pytest.raises(ServiceUnavailable, match="fair-share state is unavailable"):
            await stages(down, pools=True).standing(A)
        # without fair share /me needs no state read for a key without limits
        assert (await stages(down).standing(A))["fairshare"] == []
    finally:
        await down.aclose()


class _Clock:
    """Time that moves only when the test says so (wall and monotonic alike)."""

    def __init__(self, now: float) -> None:
        self.now = now

    def wall(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now


async def test_every_gateway_re_reads_the_usage_at_the_same_instants(store: Any) -> None:
    """Two gateways on one back end read the pool's usage half a second apart; a charge
    lands after both readings. In the next second of the wall clock both rank with it: a
    borrower of the organisation that spent goes behind, whichever gateway it reaches
    (were each reading good for a second from its own instant, the second gateway would
    still rank on the old usage, and the two would send one organisation's borrowers at
    two priorities)."""
    clock = _Clock(1_000.0)
    policy = FairShare({"p": 4}, {"p": {"a": 0.5, "b": 0.5}})

    def gateway() -> Stages:
        return Stages(
            limiter=Limiter(store),
            budgets=lambda: BudgetBook(()),
            prices=PRICES,
            pools={"m": "p"},
            classes={"m": "interactive"},
            clock=clock,
            fairshare=policy,
            fairshare_state=store,
        )

    one, two = gateway(), gateway()
    held = [await one.enter(exchange(A)) for _ in range(2)]  # a's reservation, full
    clock.now = 1_000.2
    spender = await one.enter(exchange(A))  # gateway one reads the usage: nobody spent
    clock.now = 1_000.7
    early = await two.enter(exchange(A))  # gateway two reads it too
    assert spender.priority == early.priority == 10  # rank 0: no usage anywhere
    clock.now = 1_000.8
    await one.leave(spender, served(exchange(A), 1_000_000, 0))  # a spends
    clock.now = 1_001.1
    late = [await g.enter(exchange(A)) for g in (one, two)]
    assert [t.priority for t in late] == [20, 20]  # b (no usage) ranks first on both
    for t in [*held, early, *late]:
        await one.leave(t, exchange(A))
