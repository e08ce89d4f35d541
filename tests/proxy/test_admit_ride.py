"""The fair-share claim riding with the limits (one round trip in), on a real memory or
Redis back end: the band filling between the two stages, a request cancelled between
them, and a way out that does not reach the state.

Each test runs the stages as the Gateway wires them (``claims_ride``: the claim made
in the limit stage's call, its release paid in the limit stage's settle call).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from tests.proxy.stages import PRICES, Stages, exchange, served
from tests.redis_server import private_redis_server

from fairgate.admission import AdmissionController, Bands, Lease
from fairgate.admission.observer import NullObserver
from fairgate.core.breaker import Breaker
from fairgate.core.clock import SystemClock
from fairgate.core.principal import Principal
from fairgate.fairshare import FairShare
from fairgate.limits import BudgetBook, Limiter, Limits
from fairgate.proxy.ticket import Ticket
from fairgate.state import MemoryCounterStore, RedisCounterStore

# one request in flight per key: a slot leaked by the limit stage refuses the next one
A = Principal("ka", "a", "ta", limits=Limits(max_in_flight=1))
B = Principal("kb", "b", "tb")


class _Queue(NullObserver):
    """Sets ``waiting`` when a request starts waiting in the band's queue."""

    def __init__(self) -> None:
        self.waiting = asyncio.Event()

    def queue_depth(self, pool: str, band: str, depth: int) -> None:
        if depth > 0:
            self.waiting.set()
        else:
            self.waiting.clear()


class _Ride:
    """Model m in pool p (4 seats, a and b half each), one admission band of room for
    one request: while a lease is pending, the band is full."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.queue = _Queue()
        self.readings = 0
        bands = Bands((("only", 1.0),))
        self.controller = AdmissionController(
            "p",
            bands,
            queue_size=8,
            queue_ttl=60.0,
            clock=SystemClock(),
            saturation_fn=self._saturation,
            observer=self.queue,
        )
        self.stages = Stages(
            limiter=Limiter(store),
            budgets=lambda: BudgetBook(()),
            prices=PRICES,
            pools={"m": "p"},
            classes={"m": "interactive"},
            clock=SystemClock(),
            fairshare=FairShare({"p": 4}, {"p": {"a": 0.5, "b": 0.5}}),
            fairshare_state=store,
            admission={"p": self.controller},
            bands=bands,
            ride=True,
        )

    def _saturation(self, pending: int) -> float:
        self.readings += 1
        return float(pending)

    async def held(self) -> dict[str, int]:
        """The within-share slots each organisation holds in the shared state."""
        counts: dict[str, int] = await self.store.in_flight("p", SystemClock().wall())
        return counts

    async def fill_band(self) -> Lease:
        """Another request takes the band's room (what happens during the limit
        stage's await on a busy gateway)."""
        lease = await self.controller.admit(band="only", tenant="tb")
        assert not self.controller.has_room("only")
        return lease


async def test_the_reading_that_let_the_claim_ride_admits_when_nothing_ran_between(
    store: Any,
) -> None:
    ride = _Ride(store)
    g = ride.stages
    ex, ticket = exchange(A), Ticket()
    await g.enter_limit(ex, ticket)
    assert ticket.ahead and ride.readings == 1
    await g.admit.enter(ex, ticket)
    assert ticket.lease is not None and ticket.within_share is True
    # the memory store's limit stage never awaits, so nothing else ran between the two
    # stages and the first reading still holds; Redis's awaits the network: read again
    assert ride.readings == (1 if isinstance(store, MemoryCounterStore) else 2)
    await g.leave(ticket, served(ex, 10, 10))


async def test_a_request_of_several_sequences_claims_no_seat_in_the_limit_stage_s_call(
    store: Any,
) -> None:
    ride = _Ride(store)
    g = ride.stages
    ex, ticket = exchange(A), Ticket()
    ex.sequences = 4  # e.g. n=4: a borrower, whose claim would hold four seats' work on one
    await g.enter_limit(ex, ticket)
    assert not ticket.ahead and await ride.held() == {}
    await g.admit.enter(ex, ticket)
    assert ticket.within_share is False and await ride.held() == {}
    await g.leave(ticket, served(ex, 10, 10))


async def test_a_claim_that_rode_is_given_back_when_the_band_fills_before_admit(
    store: Any,
) -> None:
    ride = _Ride(store)
    g = ride.stages
    ex, ticket = exchange(A), Ticket()
    await g.enter_limit(ex, ticket)
    assert ticket.ahead and ticket.limits is not None and ticket.limits.claim is not None
    assert await ride.held() == {"a": 1}  # claimed in the limit stage's own call
    blocker = await ride.fill_band()
    admitting = asyncio.create_task(g.admit.enter(ex, ticket))
    await ride.queue.waiting.wait()
    # waiting in admission, the request holds no within-share slot of its organisation
    assert await ride.held() == {}
    blocker.release()
    await admitting
    # claimed again when its turn came: within share, at priority 0
    assert ticket.within_share is True and ex.priority == 0
    assert await ride.held() == {"a": 1}
    assert g.fairshare_counts()[("p", "a")] == (1, 0)
    await g.leave(ticket, served(ex, 10, 10))
    assert await ride.held() == {}
    assert g.fairshare_counts()[("p", "a")] == (0, 0)
    # the key's one in-flight slot came back too
    again = await g.enter(exchange(A))
    await g.leave(again, exchange(A))


async def test_a_request_cancelled_while_waiting_after_the_limits_gives_everything_back(
    store: Any,
) -> None:
    ride = _Ride(store)
    g = ride.stages
    ex, ticket = exchange(A), Ticket()
    await g.enter_limit(ex, ticket)
    blocker = await ride.fill_band()
    admitting = asyncio.create_task(g.admit.enter(ex, ticket))
    await ride.queue.waiting.wait()
    admitting.cancel()  # the client went away while it waited
    with pytest.raises(asyncio.CancelledError):
        await admitting
    assert not ride.queue.waiting.is_set()  # out of the queue
    await g.leave(ticket, ex)  # the settle stage, in the pipeline's finally
    assert await ride.held() == {}
    assert g.fairshare_counts().get(("p", "a"), (0, 0)) == (0, 0)
    blocker.release()
    # the key's in-flight slot is free: the next request is admitted, within share
    again = await g.enter(exchange(A))
    assert again.within_share is True
    await g.leave(again, exchange(A))
    assert await ride.held() == {}


async def test_a_request_cancelled_before_admit_gives_back_the_claim_that_rode(
    store: Any,
) -> None:
    ride = _Ride(store)
    g = ride.stages
    ex, ticket = exchange(A), Ticket()
    await g.enter_limit(ex, ticket)
    assert await ride.held() == {"a": 1}
    # cancelled between the two awaits: the admit stage never took the claim over
    await g.leave(ticket, ex)
    assert await ride.held() == {}
    again = await g.enter(exchange(A))  # the key's in-flight slot came back
    assert again.within_share is True
    await g.leave(again, exchange(A))


@pytest.fixture
async def outage() -> AsyncIterator[tuple[Any, RedisCounterStore]]:
    """A store on a redis-server of the test's own, to stop and start again."""
    with private_redis_server() as server:
        # never opened by one failure: each call tries the server
        breaker = Breaker.fixed(threshold=1000, cooldown=60.0)
        store = RedisCounterStore(server.url, timeout=0.5, breaker=breaker)
        try:
            yield server, store
        finally:
            await store.aclose()


async def test_the_admit_stage_sees_a_way_out_that_does_not_reach_the_state(
    outage: tuple[Any, RedisCounterStore],
) -> None:
    server, store = outage
    g = _Ride(store).stages
    ticket = await g.enter(exchange(B))
    assert ticket.within_share is True and g.admit.available
    server.stop()
    await g.leave(ticket, served(exchange(B), 10, 10))  # the release rides, and fails
    assert not g.admit.available
    server.start()
    ticket = await g.enter(exchange(B))
    await g.leave(ticket, served(exchange(B), 10, 10))
    assert g.admit.available
