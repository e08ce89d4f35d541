"""The settle stage: one cost per request, the same in the budgets and in the record.

The real limit stage (limits and budgets on the memory and the Redis back end) gives back
what it admitted; the records are the ``UsageRecord`` values the recorder would
have queued.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from tests.proxy.stages import Stages

from fairgate.accounting import Prices, UsageRecord
from fairgate.accounting.journal import ENTRY_FIELDS, entry_record
from fairgate.core.clock import SystemClock
from fairgate.core.money import Money
from fairgate.core.principal import Principal
from fairgate.limits import Budget, BudgetBook, Limiter, Limits, Subject, prompt_tokens
from fairgate.observability.metrics import GatewayMetrics
from fairgate.proxy.exchange import Exchange, Outcome
from fairgate.proxy.records import RecordBuilder
from fairgate.proxy.reservation import Reservation
from fairgate.proxy.settle import Settler
from fairgate.proxy.ticket import Ticket
from fairgate.proxy.usage import Usage
from fairgate.state import MemoryCounterStore

PRICES = {
    "m": Prices(Money.from_units(1).micro, Money.from_units(2).micro, 0),
    "dear": Prices(Money.from_units(5).micro, Money.from_units(7).micro, 0),
}
BUDGET = Budget("team", "ta", None, "day", max=Money(10**12))
DEAR = Budget("team", "ta", "dear", "day", max=Money(10**12))  # the dear model's own
KEY = Principal("k1", "a", "ta")


class Books:
    """The limit and admit stages and a settler wired as the gateway wires them, and what
    they recorded."""

    def __init__(self, store: Any) -> None:
        book = BudgetBook((BUDGET, DEAR))
        self.store = store
        self.gate = Stages(
            limiter=Limiter(store),
            budgets=lambda: book,
            prices=PRICES,
            pools={"m": None, "dear": None},
            classes={"m": "interactive", "dear": "interactive"},
            clock=SystemClock(),
        )
        self.records: list[UsageRecord] = []
        self.metrics = GatewayMetrics()
        records = RecordBuilder(self._keep, {"m": None, "dear": None})
        self.settler = Settler(self.metrics, prices=PRICES, leave=self.gate.leaves, record=records)

    def _keep(self, record: UsageRecord) -> bool:
        self.records.append(record)
        return True

    async def spent(self, budget: Budget = BUDGET) -> Money:
        usage = await Limiter(self.store).usage(
            Subject(KEY.key_id, KEY.org, KEY.team), Limits(), (budget,), time.time()
        )
        return usage.budgets[0].spent

    def metric(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0


def exchange(*, body: int = 400, max_tokens: int = 100) -> Exchange:
    ex = Exchange("r1", "POST", "/v1/chat/completions", time.monotonic(), principal=KEY)
    ex.endpoint = "/v1/chat/completions"
    ex.requested_model = ex.model = "m"
    ex.chain = ("m", "dear")
    ex.prompt_bytes = body
    ex.parsed = {"max_tokens": max_tokens}
    ex.reservation = Reservation(prompt_tokens(body), max_tokens)
    return ex


async def admitted(books: Books, ex: Exchange) -> Ticket:
    ticket = await books.gate.enter(ex)
    # admitted at the dearest model of the chain: the reservation is on the budget
    assert await books.spent() == PRICES["dear"].cost_of(ex.reservation.usage())  # type: ignore[union-attr]
    return ticket


async def test_the_budget_and_the_record_get_the_one_cost_of_the_model_that_served(
    store: Any,
) -> None:
    books = Books(store)
    ex = exchange()
    ticket = await admitted(books, ex)
    ex.model, ex.replica, ex.status = "dear", "r0", 200  # the fallback served
    ex.usage = Usage(1_000, 300)
    await books.settler.settle(ex, ticket)
    cost = PRICES["dear"].cost_of(Usage(1_000, 300))
    assert cost != PRICES["m"].cost_of(Usage(1_000, 300))
    assert ex.cost == cost
    assert await books.spent() == cost
    [record] = books.records
    assert (record.cost, record.model, record.prompt_tokens, record.completion_tokens) == (
        cost,
        "dear",
        1_000,
        300,
    )
    assert not record.estimated
    assert books.metric("fairgate_tokens_total", model="dear", kind="prompt") == 1_000


async def test_an_answer_released_before_its_write_is_charged_and_recorded_once(
    store: Any,
) -> None:
    """A whole answer the server cannot take yet gives back its places at once; the
    settle after the write then charges, records and releases nothing again."""
    books = Books(store)
    ex = exchange()
    ticket = await admitted(books, ex)
    ex.replica, ex.status, ex.usage = "r0", 200, Usage(1_000, 300)
    await books.settler.release(ex, ticket)
    cost = PRICES["m"].cost_of(Usage(1_000, 300))
    # the reservation at the dear model's prices is settled to the real cost already
    assert await books.spent() == cost
    assert len(books.records) == 1
    assert ex.complete, "a disconnect no longer cancels it"
    await books.settler.settle(ex, ticket)
    assert await books.spent() == cost
    [record] = books.records
    assert record.cost == cost
    assert books.metric("fairgate_tokens_total", model="m", kind="prompt") == 1_000


async def test_an_answer_without_usage_is_charged_its_reservation_flagged_estimated(
    store: Any,
) -> None:
    books = Books(store)
    ex = exchange(body=4_000, max_tokens=50)
    ticket = await admitted(books, ex)
    ex.replica, ex.status, ex.outcome = "r0", 200, Outcome.TRUNCATED
    ex.unanswered = ("m",)  # and one earlier attempt that timed out after it was sent
    await books.settler.settle(ex, ticket)
    charged = Usage(2 * 1_000, 2 * 50, estimated=True)
    assert ex.usage == charged
    [record] = books.records
    assert (record.prompt_tokens, record.completion_tokens, record.estimated) == (
        2_000,
        100,
        True,
    )
    assert record.cost == await books.spent() == PRICES["m"].cost_of(charged)
    assert books.metric("fairgate_usage_estimated_total", model="m") == 1


async def test_an_unanswered_attempt_is_priced_at_the_model_it_tried_and_on_its_budget(
    store: Any,
) -> None:
    """The dear model timed out after its engine had the request, the cheap fallback
    answered: the dear attempt costs its reservation at the dear prices, in the record,
    the all-models budget and the dear model's own budget (priced at the cheap model's
    and refunded to the dear budget, a tenant got dear work for a cheap price)."""
    books = Books(store)
    ex = exchange(body=4_000, max_tokens=50)
    ticket = await admitted(books, ex)
    ex.unanswered = ("dear",)
    ex.model, ex.replica, ex.status = "m", "r1", 200
    ex.usage = Usage(1_000, 20)
    await books.settler.settle(ex, ticket)
    lost = PRICES["dear"].cost_of(Reservation(1_000, 50).usage())
    served = PRICES["m"].cost_of(Usage(1_000, 20))
    [record] = books.records
    assert record.cost == ex.cost == lost + served == await books.spent()
    assert await books.spent(DEAR) == lost
    assert (record.model, record.prompt_tokens, record.completion_tokens) == ("m", 2_000, 70)
    # the record keeps the split its budgets were charged: the dear part under dear
    assert record.other_costs == (("dear", None, lost.micro),)


async def test_attempts_on_two_models_none_answered_are_each_priced_at_their_own(
    store: Any,
) -> None:
    books = Books(store)
    ex = exchange(body=4_000, max_tokens=50)
    ticket = await admitted(books, ex)
    ex.unanswered = ("m", "dear")  # both timed out: the client got a 504
    ex.status, ex.outcome = 504, Outcome.TIMEOUT
    await books.settler.settle(ex, ticket)
    one = Reservation(1_000, 50).usage()
    assert ex.cost == PRICES["m"].cost_of(one) + PRICES["dear"].cost_of(one)
    assert await books.spent() == ex.cost == books.records[0].cost
    assert await books.spent(DEAR) == PRICES["dear"].cost_of(one)
    assert books.records[0].model == "m"
    assert books.records[0].other_costs == (("dear", None, PRICES["dear"].cost_of(one).micro),)


def test_a_write_ahead_entry_after_an_unanswered_attempt_keeps_the_split() -> None:
    """The process may die during the fallback's attempt: the entry it journals before
    it charges the dear attempt to dear, as the record would."""
    entries: list[tuple[object, ...]] = []

    def intend(entry: tuple[object, ...], previous: int | None) -> int:
        entries.append(entry)
        return len(entries)

    records = RecordBuilder(lambda r: True, {"m": "small", "dear": "big"}, intend=intend)
    settler = Settler(GatewayMetrics(), prices=PRICES, intend=records.intend)
    ex = exchange(body=4_000, max_tokens=50)
    settler.intend(ex, "dear", "r0")
    ex.unanswered = ("dear",)
    settler.intend(ex, "m", "r1")
    one = Reservation(1_000, 50).usage()
    first, second = (entry_record(e) for e in entries)
    assert (first.model, first.cost_micro, first.other_costs) == (
        "dear",
        PRICES["dear"].cost_of(one).micro,
        (),
    )
    dear = PRICES["dear"].cost_of(one).micro
    assert (second.model, second.pool, second.cost_micro, second.other_costs) == (
        "m",
        "small",
        PRICES["m"].cost_of(one).micro + dear,
        (("dear", "big", dear),),
    )
    assert len(entries[0]) == len(ENTRY_FIELDS) - 1  # none to split: read by earlier versions


async def test_a_request_that_reached_no_engine_gives_its_estimate_back(store: Any) -> None:
    books = Books(store)
    ex = exchange()
    ticket = await admitted(books, ex)
    ex.status, ex.outcome, ex.reason = 503, Outcome.UPSTREAM_ERROR, "no_replica"
    await books.settler.settle(ex, ticket)
    assert await books.spent() == Money(0)
    [record] = books.records
    assert (record.status, record.outcome, record.cost_micro, record.prompt_tokens) == (
        503,
        "upstream_error",
        0,
        0,
    )


async def test_a_refused_request_is_recorded_refused_and_counted_by_its_reason(
    store: Any,
) -> None:
    books = Books(store)
    ex = exchange()
    ex.status, ex.outcome, ex.reason = 429, Outcome.REFUSED, "rpm"
    await books.settler.settle(ex, None)  # refused before the limit stage took anything
    [record] = books.records
    assert (record.key_id, record.status, record.outcome, record.cost_micro) == (
        "k1",
        429,
        "refused",
        0,
    )
    assert books.metric("fairgate_denials_total", reason="rpm") == 1
    assert books.metric("fairgate_requests_total", model="m", route=ex.endpoint, status="429") == 1


async def test_a_request_whose_key_is_unknown_has_no_record_but_is_counted(store: Any) -> None:
    books = Books(store)
    ex = Exchange("r2", "POST", "/v1/chat/completions", time.monotonic())
    ex.status, ex.outcome, ex.reason = 401, Outcome.REFUSED, "invalid_api_key"
    await books.settler.settle(ex, None)
    assert books.records == []
    assert books.metric("fairgate_denials_total", reason="invalid_api_key") == 1


async def test_the_record_is_kept_when_the_leave_step_is_cancelled() -> None:
    """A cancellation while the state back end is being answered (the server's grace
    period ran out) still gives back the next stage's slots and leaves the request's
    record and its metrics."""
    records: list[UsageRecord] = []
    entered = asyncio.Event()
    given_back: list[str] = []

    async def leave(ticket: Ticket, ex: Exchange) -> None:
        entered.set()
        await asyncio.Event().wait()  # a back end that never answers

    async def later(ticket: Ticket, ex: Exchange) -> None:
        given_back.append(ex.request_id)

    metrics = GatewayMetrics()
    settler = Settler(
        metrics,
        prices=PRICES,
        leave=(leave, later),
        record=RecordBuilder(lambda r: records.append(r) is None, {"m": None}),
    )
    ex = exchange()
    ex.replica, ex.status, ex.usage = "r0", 200, Usage(10, 10)
    ticket = await Books(MemoryCounterStore()).gate.enter(ex)
    task = asyncio.ensure_future(settler.settle(ex, ticket))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert given_back == [ex.request_id]
    [record] = records
    assert record.cost == PRICES["m"].cost_of(Usage(10, 10))
    assert (
        metrics.registry.get_sample_value(
            "fairgate_requests_total", {"model": "m", "route": ex.endpoint, "status": "200"}
        )
        == 1
    )
