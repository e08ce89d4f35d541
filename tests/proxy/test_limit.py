"""The limit stage in one process: rate limits, budgets, tags and the head check on a
real memory or Redis back end (with the admit stage after it, as the pipeline runs them)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from tests.proxy.stages import PRICES, Stages, exchange, served, stages

from fairgate.accounting import Prices
from fairgate.core.clock import SystemClock
from fairgate.core.errors import BadRequest, RateLimited
from fairgate.core.money import Money
from fairgate.core.principal import Principal
from fairgate.limits import Budget, BudgetBook, Limiter, Limits, Subject
from fairgate.proxy.tags import TagPolicy
from fairgate.state import MemoryCounterStore, RedisCounterStore

A = Principal("ka", "a", "ta")
B = Principal("kb", "b", "tb")


async def test_in_flight_limit_is_given_back_when_the_request_leaves(store: Any) -> None:
    g = stages(store)
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
    g = stages(store, budgets=(budget,))
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
    g = stages(
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
    g = stages(MemoryCounterStore(), budgets=spent, tags=policy)
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
    g = stages(store, budgets=per_model, prices=expensive)
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
    done = served(ex, 10, 10)
    done.model = "y"  # the fallback served
    await g.leave(ticket, done)
    real = expensive["y"].cost_of(done.usage)  # type: ignore[arg-type]
    usage = await limiter.usage(Subject("k1", "a", "ta"), Limits(), per_model, time.time())
    assert [b.spent for b in usage.budgets] == [Money(0), real, real]


@pytest.mark.parametrize("m_full", [False, True])
async def test_a_retry_takes_one_more_reservation_of_the_tried_model_s_budgets_only(
    store: Any, m_full: bool
) -> None:
    # Reserved at the dearest model of the chain (y) on every budget, the request fills
    # y's budget at admission. Its attempt on m got no answer: a retry on m is charged to
    # the budgets that attempt is charged to (all models, m's own), not to y's, and is
    # refused only when one of those is full.
    expensive = {**PRICES, "y": Prices(Money.from_units(5).micro, Money.from_units(7).micro, 0)}
    probe = exchange(A)
    reserved = expensive["y"].cost_of(probe.reservation.usage())  # type: ignore[union-attr]
    budgets = (
        Budget("team", "ta", "m", "day", max=reserved if m_full else Money(10**12)),
        Budget("team", "ta", "y", "day", max=reserved),
        Budget("team", "ta", None, "day", max=Money(10**12)),
    )
    g = stages(store, budgets=budgets, prices=expensive)
    limiter = Limiter(store)
    ex = exchange(A)
    ex.chain = ("m", "y")
    ticket = await g.enter(ex)
    assert await g.limit.retry(ex, ticket, "m") is not m_full
    ex.unanswered = ("m",)
    done = served(ex, 10, 10)
    await g.leave(ticket, done)
    usage = await limiter.usage(Subject("ka", "a", "ta"), Limits(), budgets, time.time())
    # the settle charged every attempt and the retry's charge was given back
    assert usage.budgets[2].spent == done.cost and done.cost.micro > 0
    assert usage.budgets[1].spent == Money(0)  # y never ran


async def test_a_new_budget_book_binds_the_next_request_of_a_key_already_seen() -> None:
    books = [BudgetBook()]
    g = Stages(
        limiter=Limiter(MemoryCounterStore()),
        budgets=lambda: books[-1],
        prices=PRICES,
        pools={"m": None},
        classes={"m": "interactive"},
        clock=SystemClock(),
    )
    principal = Principal("k1", "a", "ta")
    for _ in range(2):  # seen, and its terms remembered, under the empty book
        await g.leave(await g.enter(exchange(principal)), exchange(principal))
    books.append(BudgetBook([Budget("key", "k1", None, "day", max=Money(0))]))
    with pytest.raises(RateLimited, match="key 'k1'"):
        await g.enter(exchange(principal))
    books.append(BudgetBook())  # the budget deleted: served again
    await g.leave(await g.enter(exchange(principal)), exchange(principal))


async def test_a_key_whose_limits_change_is_held_to_the_new_ones_at_once() -> None:
    g = stages(MemoryCounterStore())
    before = Principal("k1", "a", "ta", limits=Limits(rpm=5))
    await g.enter(exchange(before))  # seen with rpm 5, one request counted
    after = Principal("k1", "a", "ta", limits=Limits(rpm=1))  # the key cache's new principal
    with pytest.raises(RateLimited, match="1 requests per minute"):
        await g.enter(exchange(after))
    await g.enter(exchange(before))  # the old principal still carries its own limits


async def test_the_terms_of_one_key_differ_by_chain_and_tags() -> None:
    spent = (
        Budget("team", "ta", "y", "day", max=Money(0)),
        Budget("tag", "nightly", None, "day", max=Money(0)),
    )
    policy = TagPolicy(allowed=frozenset({"nightly"}))
    g = stages(MemoryCounterStore(), budgets=spent, tags=policy)
    principal = Principal("k1", "a", "ta")
    await g.enter(exchange(principal))  # model m alone, no tag: neither budget applies
    ex = exchange(principal)
    ex.chain = ("m", "y")  # y may serve it: y's budget binds it
    with pytest.raises(RateLimited, match="for model 'y'"):
        await g.enter(ex)
    with pytest.raises(RateLimited, match="tag 'nightly'"):
        await g.enter(exchange(principal), b"nightly")
    await g.enter(exchange(principal))


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
    g = stages(store)
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
    g = stages(store)
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
    g = Stages(
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
