"""The gate in one process: limits, budgets and fair share on a real memory or Redis back end."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from fairgate.accounting import Prices
from fairgate.core.clock import SystemClock
from fairgate.core.errors import BadRequest, RateLimited, ServiceUnavailable
from fairgate.core.money import Money
from fairgate.core.principal import Principal
from fairgate.fairshare import FairShare
from fairgate.limits import Budget, BudgetBook, Limiter, Limits, Subject, prompt_tokens
from fairgate.proxy.exchange import Exchange
from fairgate.proxy.gate import Gate, TagPolicy
from fairgate.proxy.reservation import Reservation
from fairgate.proxy.usage import Usage
from fairgate.state import MemoryCounterStore, RedisCounterStore

PRICES = {"m": Prices(Money.from_units(1).micro, Money.from_units(2).micro, 0)}


def exchange(principal: Principal, *, body: int = 400, max_tokens: int | None = 100) -> Exchange:
    ex = Exchange(request_id="r", method="POST", path="/v1/chat/completions", started=0.0)
    ex.principal = principal
    ex.requested_model = ex.model = "m"
    ex.prompt_bytes = body
    ex.parsed = {} if max_tokens is None else {"max_tokens": max_tokens}
    ex.reservation = Reservation(prompt_tokens(body), 256 if max_tokens is None else max_tokens)
    return ex


def served(
    ex: Exchange, prompt: int, completion: int, prices: dict[str, Prices] = PRICES
) -> Exchange:
    """``ex`` as the settle stage hands it to ``leave``: its usage and that usage's cost."""
    ex.replica = "r0"
    ex.usage = Usage(prompt, completion)
    ex.cost = prices[ex.model].cost_of(ex.usage)
    return ex


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    if request.param == "memory":
        yield MemoryCounterStore()
        return
    url = request.getfixturevalue("redis_url")
    redis = RedisCounterStore(url, prefix=f"fg-test:gate:{id(request)}:")
    yield redis
    await redis.aclose()


def gate(
    store: Any,
    *,
    budgets: tuple[Budget, ...] = (),
    pools: bool = False,
    tags: TagPolicy | None = None,
    prices: dict[str, Prices] | None = None,
) -> Gate:
    fairshare = FairShare({"p": 4}, {"p": {"a": 0.5, "b": 0.5}}) if pools else None
    book = BudgetBook(budgets)
    return Gate(
        limiter=Limiter(store),
        budgets=lambda: book,
        prices=PRICES if prices is None else prices,
        pools={"m": "p" if pools else None},
        classes={"m": "interactive"},
        clock=SystemClock(),
        fairshare=fairshare,
        fairshare_state=store if pools else None,
        tags=tags,
    )


A = Principal("ka", "a", "ta")
B = Principal("kb", "b", "tb")


async def test_within_share_requests_get_priority_0_then_the_org_borrows(store: Any) -> None:
    g = gate(store, pools=True)
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


async def test_usage_is_charged_when_a_request_ends_and_ranks_the_borrower(store: Any) -> None:
    g = gate(store, pools=True)
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
    g = Gate(
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


async def test_in_flight_limit_is_given_back_when_the_request_leaves(store: Any) -> None:
    g = gate(store)
    limited = Principal("k1", "a", "ta", limits=Limits(max_in_flight=1))
    first = await g.enter(exchange(limited))
    with pytest.raises(RateLimited, match="1 in flight"):
        await g.enter(exchange(limited))
    await g.leave(first, exchange(limited))  # never reached an engine
    second = await g.enter(exchange(limited))
    await g.leave(second, exchange(limited))


async def test_a_budget_is_reserved_at_the_estimate_and_corrected_by_the_real_cost(
    store: Any,
) -> None:
    # estimate: 100 prompt tokens (400 bytes) at 1/Mtok + 100 completion at 2/Mtok = 300 µ;
    # a budget admits while something is left (overspend bounded by one estimate)
    budget = Budget("team", "ta", None, "day", max=Money(300))
    g = gate(store, budgets=(budget,))
    principal = Principal("k1", "a", "ta")
    first = await g.enter(exchange(principal))
    with pytest.raises(RateLimited, match="team 'ta'") as refused:
        await g.enter(exchange(principal))  # 300 reserved: nothing left
    assert refused.value.headers() == []  # waiting does not help: no Retry-After
    await g.leave(first, served(exchange(principal), 50, 25))  # really 100 µ
    second = await g.enter(exchange(principal))  # 100 spent: room left
    await g.leave(second, served(exchange(principal), 50, 25))
    standing = await g.standing(principal)
    (shown,) = standing["budgets"]
    assert shown["spent_micro"] == 200 and shown["max_micro"] == 300


async def test_request_tags_reach_tag_budgets() -> None:
    budget = Budget("tag", "nightly", None, "day", max=Money(0))
    g = gate(
        MemoryCounterStore(), budgets=(budget,), tags=TagPolicy(allowed=frozenset({"nightly"}))
    )
    principal = Principal("k1", "a", "ta")
    ticket = await g.enter(exchange(principal))  # no tag: the tag budget does not apply
    await g.leave(ticket, exchange(principal))
    with pytest.raises(RateLimited, match="tag 'nightly'"):
        await g.enter(exchange(principal), b"nightly")


async def test_an_owned_tag_budget_binds_only_its_owners_requests() -> None:
    spent = (
        Budget("tag", "org:a/grant", None, "day", max=Money(0)),
        Budget("tag", "team:tb/grant", None, "day", max=Money(0)),
    )
    policy = TagPolicy(by_org={"a": frozenset({"grant"}), "b": frozenset({"grant"})})
    g = gate(MemoryCounterStore(), budgets=spent, tags=policy)
    with pytest.raises(RateLimited, match="tag 'org:a/grant'"):
        await g.enter(exchange(A), b"grant")
    with pytest.raises(RateLimited, match="tag 'team:tb/grant'"):
        await g.enter(exchange(B), b"grant")
    other_team = Principal("kc", "b", "tc")  # org b, another team: neither budget is its own
    ticket = await g.enter(exchange(other_team), b"grant")
    await g.leave(ticket, served(exchange(other_team), 10, 10))
    # a key's own tags are owned the same way
    tagged = Principal("kd", "b", "tc", tags=("grant",))
    ticket = await g.enter(exchange(tagged))
    await g.leave(ticket, served(exchange(tagged), 10, 10))


async def test_a_fallback_chain_reserves_every_models_budget_and_charges_the_one_that_served(
    store: Any,
) -> None:
    per_model = (
        Budget("team", "ta", "m", "day", max=Money(10**9)),
        Budget("team", "ta", "y", "day", max=Money(10**9)),
        Budget("team", "ta", None, "day", max=Money(10**9)),
    )
    expensive = {**PRICES, "y": Prices(Money.from_units(5).micro, Money.from_units(7).micro, 0)}
    g = gate(store, budgets=per_model, prices=expensive)
    limiter = Limiter(store)
    principal = Principal("k1", "a", "ta")
    ex = exchange(principal)
    ex.chain = ("m", "y")
    ticket = await g.enter(ex)
    assert ticket.limits is not None
    # reserved at the dearest model of the chain, on every model's budget
    cost = expensive["y"].cost_of(ex.reservation.usage())  # type: ignore[union-attr]
    usage = await limiter.usage(Subject("k1", "a", "ta"), Limits(), per_model, time.time())
    assert [b.spent for b in usage.budgets] == [cost] * 3
    ex.model = "y"  # the fallback served
    done = served(ex, 10, 10, expensive)
    await g.leave(ticket, done)
    real = expensive["y"].cost_of(done.usage)  # type: ignore[arg-type]
    usage = await limiter.usage(Subject("k1", "a", "ta"), Limits(), per_model, time.time())
    assert [b.spent for b in usage.budgets] == [Money(0), real, real]


async def test_the_state_back_end_down_fails_closed_and_borrows_for_fair_share() -> None:
    down = RedisCounterStore("redis://127.0.0.1:1", timeout=0.2)
    try:
        limited = Principal("k1", "a", "ta", limits=Limits(rpm=10))
        with pytest.raises(ServiceUnavailable, match="unavailable"):
            await gate(down).enter(exchange(limited))
        # fair share alone: served, at the lowest borrowing priority (101 for batch,
        # 100 for interactive), never within a reservation it cannot prove
        ticket = await gate(down, pools=True).enter(exchange(A))
        assert ticket.priority == 100
    finally:
        await down.aclose()


def test_tag_policy() -> None:
    policy = TagPolicy(limit=2, allowed=frozenset({"x", "y", "z"}))
    assert policy.parse(b" x , y,x ") == ("x", "y")
    with pytest.raises(BadRequest, match="at most 2 tags"):
        policy.parse(b"x,y,z")
    with pytest.raises(BadRequest, match="'w' in the x-fairgate-tags header is not allowed"):
        policy.parse(b"w")
    # nothing listed: the header may carry no tag at all
    with pytest.raises(BadRequest, match="not allowed"):
        TagPolicy().parse(b"x")
    # an organisation's own list adds to the shared one, for its keys only
    own = TagPolicy(allowed=frozenset({"x"}), by_org={"a": frozenset({"w"})}, header="x-tags")
    assert own.parse(b"w,x", "a") == ("w", "x")
    with pytest.raises(BadRequest, match="'w' in the x-tags header") as refused:
        own.parse(b"w", "b")
    assert "'a'" not in str(refused.value) and "x'" not in str(refused.value)
    with pytest.raises(BadRequest, match="a tag is 1 to 64"):
        TagPolicy().parse(b"bad tag")


async def test_the_head_check_refuses_a_key_at_its_in_flight_limit_before_the_limiter(
    store: Any,
) -> None:
    g = gate(store)
    one = Principal("kh", "a", "ta", limits=Limits(max_in_flight=1))
    held = await g.enter(exchange(one))
    with pytest.raises(RateLimited) as refused:
        g.check_head(one)
    assert refused.value.code == "in_flight_limit_exceeded"
    await g.leave(held, exchange(one))
    g.check_head(one)  # free again the moment the request left
    again = await g.enter(exchange(one))
    await g.leave(again, exchange(one))


async def test_the_head_check_reuses_the_limiters_rpm_refusal(store: Any) -> None:
    g = gate(store)
    key = Principal(f"kr{id(store)}", "a", "ta", limits=Limits(rpm=1))
    await g.leave(await g.enter(exchange(key)), exchange(key))
    g.check_head(key)  # nothing refused yet: the head does not guess
    with pytest.raises(RateLimited):
        await g.enter(exchange(key))
    with pytest.raises(RateLimited) as refused:
        g.check_head(key)
    assert refused.value.code == "rpm_limit_exceeded" and refused.value.retry_after
    g.check_head(
        Principal(key.key_id, "a", "ta", limits=Limits(rpm=2))
    )  # raised: the limiter decides


async def test_the_head_check_stands_aside_while_the_back_end_is_down_and_fails_open() -> None:
    store = RedisCounterStore("redis://127.0.0.1:1", prefix="fg-test:down:")
    g = Gate(
        limiter=Limiter(store, fail_open=True),
        budgets=BudgetBook,
        prices=PRICES,
        pools={"m": None},
        classes={},
        clock=SystemClock(),
    )
    one = Principal("kd", "a", "ta", limits=Limits(max_in_flight=1))
    tickets = [await g.enter(exchange(one)) for _ in range(2)]  # served uncounted
    g.check_head(one)
    for ticket in tickets:
        await g.leave(ticket, exchange(one))
    await store.aclose()


async def test_me_shows_the_orgs_fair_share_standing_in_each_pool_its_key_uses(
    store: Any,
) -> None:
    g = gate(store, pools=True)
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
            await gate(down, pools=True).standing(A)
        # without fair share /me needs no state read for a key without limits
        assert (await gate(down).standing(A))["fairshare"] == []
    finally:
        await down.aclose()
