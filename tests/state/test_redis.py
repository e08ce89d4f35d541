"""What only the Redis back end has: several gateways, expiries, leases, outages."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
from redis.asyncio import Redis

from fairgate.core.money import Money
from fairgate.limits import (
    Budget,
    Charge,
    Demand,
    InFlightCharge,
    Limiter,
    Limits,
    PeriodCharge,
    StateUnavailable,
    Subject,
    WindowCharge,
)
from fairgate.limits.charges import MarkCharge
from fairgate.limits.fairshare_state import ClaimRequest, UsageCharge
from fairgate.state import Breaker, RedisCounterStore
from redis_keys import delete_prefix
from redis_server import RedisProcess, free_port, private_redis_server, scripts_waiting

pytestmark = pytest.mark.redis

T0 = 1_700_000_040.0
StoreFactory = Callable[..., RedisCounterStore]


@pytest.fixture
def private_redis() -> Iterator[RedisProcess]:
    with private_redis_server() as server:
        yield server


@pytest.fixture
async def stores(redis_url: str) -> AsyncIterator[StoreFactory]:
    """Stores on the shared Redis, sharing one fresh prefix unless told otherwise."""
    prefix = f"fgtest:{uuid.uuid4().hex}:"
    made: list[RedisCounterStore] = []

    def make(**options: object) -> RedisCounterStore:
        options.setdefault("prefix", prefix)
        options.setdefault("timeout", 5.0)
        store = RedisCounterStore(redis_url, **options)  # type: ignore[arg-type]
        made.append(store)
        return store

    yield make
    for store in made:
        await store.aclose()
    client = Redis.from_url(redis_url)
    try:
        for used in {store.prefix for store in made}:
            keys = [k async for k in client.scan_iter(match=f"{used}*", count=1000)]
            if keys:
                await client.delete(*keys)
    finally:
        await client.aclose()


async def test_two_gateways_on_one_redis_enforce_one_limit(stores: StoreFactory) -> None:
    east, west = stores(), stores()
    charges = [WindowCharge("rpm:k", 1, 10), InFlightCharge("inflight:k", 4)]
    gateways = [east, west] * 20
    verdicts = await asyncio.gather(*(g.acquire(charges, T0) for g in gateways))
    assert sum(v.admitted for v in verdicts) == 4  # the in-flight limit binds first
    for gateway, verdict in zip(gateways, verdicts, strict=True):
        if verdict.lease is not None:
            await gateway.settle(verdict.lease, {}, T0)
    more = await asyncio.gather(*(g.acquire([charges[0]], T0 + 1) for g in gateways))
    assert sum(v.admitted for v in more) == 6  # 10 per minute between them, not 10 each


async def test_prefixes_keep_gateways_apart(stores: StoreFactory) -> None:
    one = stores(prefix=f"fgtest:{uuid.uuid4().hex}:")
    other = stores(prefix=f"fgtest:{uuid.uuid4().hex}:")
    assert (await one.acquire([WindowCharge("rpm:k", 1, 1)], T0)).admitted
    assert not (await one.acquire([WindowCharge("rpm:k", 1, 1)], T0)).admitted
    assert (await other.acquire([WindowCharge("rpm:k", 1, 1)], T0)).admitted


async def test_every_key_expires_so_redis_does_not_grow_forever(
    stores: StoreFactory, redis_url: str
) -> None:
    store = stores()
    now = time.time()
    day = PeriodCharge("budget:b:today", 5, 100, now + 60, now + 120, True)
    charges = [WindowCharge("tpm:k", 10, 1_000), day, InFlightCharge("inflight:k", 3)]
    verdict = await store.acquire(charges, now)
    assert verdict.lease is not None
    await store.settle(verdict.lease, {"tpm:k": 50}, now + 1)
    await store.seed(PeriodCharge("budget:seeded", 0, 9, now + 60, now + 90), 7, now, track=20)
    await store.acquire([InFlightCharge("inflight:k", 3)], now)  # one slot left held
    client = Redis.from_url(redis_url)
    try:
        keys = [k async for k in client.scan_iter(match=f"{store.prefix}*")]
        assert len(keys) == 5
        ttls = {k.decode(): await client.pttl(k) for k in keys}
    finally:
        await client.aclose()
    assert all(ttl > 0 for ttl in ttls.values()), ttls
    assert ttls[f"{store.prefix}tpm:k"] <= 62_000
    assert 115_000 < ttls[f"{store.prefix}budget:b:today"] <= 120_000
    assert ttls[f"{store.prefix}inflight:k"] <= 2 * store.lease_ttl * 1000
    assert ttls[f"{store.prefix}budget:seeded:seeded"] <= 20_000


async def test_a_budget_seeded_by_a_gateway_that_served_it_uncharged_adds_what_was_recorded_since(
    stores: StoreFactory,
) -> None:
    """Gateway A seeds a new budget with the recorded 500 and reserves 300 on it; gateway B,
    which served 200 before it knew the budget, seeds it with the recorded 700. Taking
    the larger (800) would lose B's 200; B adds them. A gateway just started (nothing
    served uncharged) changes nothing while the seed is kept, then raises at most."""
    store = stores()
    now = time.time()
    counter = PeriodCharge("budget:new:month", 0, 10**6, now + 60, now + 120)
    await store.seed(counter, 500, now, track=20, uncharged=True)  # A: nothing before
    assert (await store.acquire([replace(counter, amount=300)], now)).admitted
    await store.seed(counter, 700, now, track=20, uncharged=True)  # B
    assert await store.read([counter], now) == (1_000,)
    await store.seed(counter, 700, now, track=20, uncharged=True)  # the same total again
    await store.seed(counter, 900, now, track=20)  # a gateway starting
    await store.seed(counter, 400, now, track=20, uncharged=True)  # never lowered
    assert await store.read([counter], now) == (1_000,)
    # once the seed is forgotten, a seed raises the counter to the total, as before
    other = replace(counter, key="budget:other:month")
    await store.seed(other, 1_500, now, track=0.001, uncharged=True)
    await asyncio.sleep(0.01)
    await store.seed(other, 1_600, now, track=20, uncharged=True)
    assert await store.read([other], now) == (1_600,)


async def test_expiries_are_set_when_a_write_creates_what_they_must_outlive(
    private_redis: RedisProcess,
) -> None:
    """A window's hash gets its expiry when a bucket is created, a period counter when
    it is created; a further write to either runs no PEXPIRE (Redis's one thread runs
    every request's commands), and a new bucket extends the window's expiry again."""
    store = RedisCounterStore(private_redis.url, timeout=5.0)
    admin = Redis.from_url(private_redis.url)

    async def pexpires() -> int:
        stats = await admin.info("commandstats")
        return int(stats.get("cmdstat_pexpire", {}).get("calls", 0))

    def charges(now: float) -> list[Charge]:
        day = PeriodCharge("rpd:k:d", 1, 100, now + 60, now + 120)
        return [WindowCharge("tpm:k", 10, 1_000), day]

    try:
        first = await store.acquire(charges(T0), T0)
        assert first.lease is not None and await pexpires() == 2
        second = await store.acquire(charges(T0), T0 + 0.5)  # the same bucket and day
        assert second.lease is not None and second.totals == (20, 2)
        await store.settle(second.lease, {"tpm:k": 15}, T0 + 0.5)  # excess into that bucket
        assert await pexpires() == 2
        await admin.pexpire("fairgate:tpm:k", 5_000)  # so that an extension shows
        await store.acquire([WindowCharge("tpm:k", 10, 1_000)], T0 + 0.7)
        assert 0 < await admin.pttl("fairgate:tpm:k") <= 5_000  # not extended
        await store.acquire([WindowCharge("tpm:k", 10, 1_000)], T0 + 5)  # a new bucket
        assert await pexpires() == 4  # the test's own PEXPIRE and the new bucket's
        assert await admin.pttl("fairgate:tpm:k") > 60_000  # a window and two granules
        assert 115_000 < await admin.pttl("fairgate:rpd:k:d") <= 120_000  # set once
    finally:
        await admin.aclose()
        await store.aclose()


async def test_a_correction_never_recreates_an_expired_period(
    stores: StoreFactory, redis_url: str
) -> None:
    store = stores()
    counter = PeriodCharge("budget:old", 10, 100, T0 + 60, T0 + 120, True)
    verdict = await store.acquire([counter], T0)
    assert verdict.lease is not None
    client = Redis.from_url(redis_url)
    try:
        await client.delete(f"{store.prefix}budget:old")  # as its expiry would
        await store.settle(verdict.lease, {"budget:old": 60}, T0 + 200)
        assert await client.exists(f"{store.prefix}budget:old") == 0
    finally:
        await client.aclose()


async def test_a_dead_gateways_slots_expire_after_the_lease_ttl(stores: StoreFactory) -> None:
    dead, live = stores(lease_ttl=30.0), stores(lease_ttl=30.0)
    slot = InFlightCharge("inflight:k", 1)
    assert (await dead.acquire([slot], T0)).admitted
    await dead.aclose()  # the gateway is gone without settling
    assert not (await live.acquire([slot], T0 + 29)).admitted
    assert (await live.acquire([slot], T0 + 31)).admitted


async def test_a_live_gateway_keeps_its_slots_by_refreshing(stores: StoreFactory) -> None:
    holder, other = stores(lease_ttl=30.0), stores(lease_ttl=30.0)
    assert holder.refresh_interval == 10.0
    slot = InFlightCharge("inflight:k", 1)
    held = await holder.acquire([slot], T0)
    assert held.lease is not None
    await holder.refresh(T0 + 20)
    assert not (await other.acquire([slot], T0 + 45)).admitted
    await holder.settle(held.lease, {}, T0 + 46)
    await holder.refresh(T0 + 47)  # a settled lease is not brought back
    assert (await other.acquire([slot], T0 + 47)).admitted


async def test_nothing_listening_fails_fast_and_opens_the_breaker(stores: StoreFactory) -> None:
    store = RedisCounterStore(
        f"redis://127.0.0.1:{free_port()}/0", timeout=0.5, breaker=Breaker.fixed(cooldown=30.0)
    )
    try:
        for _ in range(3):
            with pytest.raises(StateUnavailable, match="Redis call failed"):
                await asyncio.wait_for(store.acquire([WindowCharge("rpm:k", 1, 5)], T0), 10)
        assert store.breaker.state == "open"
        started = time.monotonic()
        for _ in range(100):
            with pytest.raises(StateUnavailable, match="breaker open"):
                await store.read([WindowCharge("rpm:k", 1, 5)], T0)
        assert time.monotonic() - started < 5  # no network at all while open
    finally:
        await store.aclose()


async def test_a_script_refusing_one_calls_arguments_opens_no_breaker(stores: StoreFactory) -> None:
    """A charge past Redis's 64-bit integers (a request's own data could make one) fails
    that call, as often as it is sent, and every other caller goes on being served:
    before, three such calls opened the breaker every tenant of the gateway shares."""
    store = stores(breaker=Breaker.fixed(cooldown=30.0))
    now = time.time()
    huge = PeriodCharge("budget:t:month", 10**19, 10**20, now + 60, now + 120, True)
    for _ in range(5):
        with pytest.raises(StateUnavailable, match="ResponseError"):
            await store.acquire([WindowCharge("rpm:attacker", 1, 100), huge], now)
    assert store.breaker.state == "closed"
    assert (await store.acquire([WindowCharge("rpm:other", 1, 100)], now)).admitted


async def test_a_reservation_across_a_restore_is_charged_its_cost_not_refunded(
    stores: StoreFactory, redis_url: str
) -> None:
    """Redis lost its data while a request with a large reservation was in flight; the
    budget's counter was restored from the recorded spend (900 of 1,000) with a new
    mark. Its settle refunded the reservation it had taken from the old counter, and the
    restored counter fell to 0: ten more requests were served past the budget."""
    store = stores()
    now = time.time()
    mark = MarkCharge("restored-spend")
    await store.seed(PeriodCharge("restored-spend", 0, 1, 4e9, 4e9), 11, now)
    budget = PeriodCharge("budget:t:month", 600_000, 10**9, now + 60, now + 120, True)
    verdict = await store.acquire([budget, mark], now)
    assert verdict.lease is not None and verdict.lease.mark == 11
    await delete_prefix(redis_url, store.prefix)  # the data is lost
    restored = PeriodCharge("budget:t:month", 0, 10**9, now + 60, now + 120)
    await store.seed(restored, 900, now)  # the spend recorded in the store
    await store.seed(PeriodCharge("restored-spend", 0, 1, 4e9, 4e9), 12, now)  # a new mark
    await store.settle(verdict.lease, {"budget:t:month": 100}, now + 1)  # it cost 100
    assert await store.read([restored], now + 1) == (1_000,)
    # without a restore between, the same settle corrects the reservation as before
    again = await store.acquire([budget, mark], now)
    assert again.lease is not None and again.lease.mark == 12
    await store.settle(again.lease, {"budget:t:month": 100}, now + 1)
    assert await store.read([restored], now + 1) == (1_100,)


async def test_a_server_that_never_answers_costs_one_timeout() -> None:
    done = asyncio.Event()

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1 << 16)
        await done.wait()  # read the command, never answer
        writer.close()

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    store = RedisCounterStore(f"redis://127.0.0.1:{port}/0", timeout=0.3)
    try:
        started = time.monotonic()
        with pytest.raises(StateUnavailable):
            await asyncio.wait_for(store.acquire([WindowCharge("rpm:k", 1, 5)], T0), 20)
        assert time.monotonic() - started < 10
    finally:
        done.set()
        await store.aclose()
        server.close()
        await server.wait_closed()


async def test_redis_killed_and_restarted_recovers_by_itself(private_redis: RedisProcess) -> None:
    store = RedisCounterStore(
        private_redis.url, timeout=0.5, breaker=Breaker.fixed(threshold=2, cooldown=0.2)
    )
    rpm = WindowCharge("rpm:k", 1, 100)
    try:
        assert (await store.acquire([rpm], T0)).admitted
        private_redis.stop()
        with pytest.raises(StateUnavailable):
            await asyncio.wait_for(store.acquire([rpm], T0 + 1), 10)
        private_redis.start()
        recovered = None
        deadline = time.monotonic() + 15
        while recovered is None and time.monotonic() < deadline:
            try:
                recovered = await asyncio.wait_for(store.acquire([rpm], T0 + 2), 10)
            except StateUnavailable:
                await asyncio.sleep(0.1)
        assert recovered is not None and recovered.admitted
        # the new server had no scripts (NOSCRIPT → loaded again) and no counters:
        # what lived only in Redis is gone after a restart without persistence
        assert recovered.totals == (1,)
        assert store.breaker.state == "closed"
    finally:
        await store.aclose()


async def test_scripts_flushed_from_the_server_are_loaded_again(
    private_redis: RedisProcess,
) -> None:
    store = RedisCounterStore(private_redis.url, timeout=5.0)
    admin = Redis.from_url(private_redis.url)
    try:
        assert (await store.acquire([WindowCharge("rpm:k", 1, 5)], T0)).admitted
        await admin.script_flush()
        verdict = await store.acquire([WindowCharge("rpm:k", 1, 5)], T0)
        assert verdict.admitted and verdict.totals == (2,)
    finally:
        await admin.aclose()
        await store.aclose()


async def _evalsha(admin: Redis) -> int:
    """EVALSHA calls the server ran so far (INFO commandstats)."""
    stats = await admin.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


def _count_round_trips(store: RedisCounterStore) -> list[int]:
    """Count each write to the server of ``store``: a command on its pooled connections,
    a loop turn's script calls on its pipelined one. Returns the one-element counter."""
    sent = [0]
    pool = store.client.connection_pool
    base = pool.connection_class

    class Counting(base):  # type: ignore[valid-type,misc]
        async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            sent[0] += 1
            await super().send_packed_command(command, check_health)

    pool.connection_class = Counting
    pipe = store._scripts
    flush = pipe._flush

    def counting_flush() -> None:
        sent[0] += bool(pipe._out)
        flush()

    pipe._flush = counting_flush  # type: ignore[method-assign]
    return sent


async def test_a_request_costs_one_command_in_and_one_out(private_redis: RedisProcess) -> None:
    """Rate windows, a day count, an in-flight slot, two budgets and the fair-share
    claim on the way in; the settle, the slot's release and the usage charge on the
    way out: one EVALSHA each, as the server counts them (also after a script flush)."""
    store = RedisCounterStore(private_redis.url, timeout=5.0)
    admin = Redis.from_url(private_redis.url)
    subject = Subject(key="k", org="etabA", team="lab-nlp")
    limits = Limits(rpm=100, tpm=100_000, rpd=1000, max_in_flight=10)
    budgets = (
        Budget("team", "lab-nlp", None, "month", Money.from_units("100")),
        Budget("key", "k", None, "day", Money.from_units("10"), soft=Money.from_units("5")),
    )
    demand = Demand(subject, limits, "llama", 200, Money.from_units("0.01"), budgets)
    limiter = Limiter(store)
    asked = ClaimRequest("b300", "etabA", 2)
    usage = UsageCharge("b300", "etabA", 0.01, 86400.0, team="lab-nlp")
    sent = _count_round_trips(store)
    try:
        for round_ in range(3):
            if round_ == 2:
                await admin.script_flush()  # as after a Redis restart: loaded again
            before = sent[0], await _evalsha(admin)
            admission = await limiter.admit(demand, T0 + round_, claim=asked)
            way_in = sent[0] - before[0], await _evalsha(admin) - before[1]
            assert admission.lease is not None and len(admission.lease.charges) == 6
            assert admission.claim is not None and admission.claim.within_share
            before = sent[0], await _evalsha(admin)
            settled = await limiter.settle(
                admission,
                tokens=150,
                cost=Money.from_units("0.008"),
                now=T0 + round_ + 1,
                release=admission.claim,
                charge=usage,
            )
            way_out = sent[0] - before[0], await _evalsha(admin) - before[1]
            assert settled
            if round_ == 1:  # the first round connected and loaded the scripts
                assert way_in == (1, 1)  # (round trips, EVALSHA the server ran)
                assert way_out == (1, 1)
        assert await store.in_flight("b300", T0 + 5) == {}
        assert await store.usage("b300", T0 + 3, 86400.0) == pytest.approx(
            {"etabA": 0.03}, rel=1e-3
        )
    finally:
        await admin.aclose()
        await store.aclose()


async def test_callers_cancelled_on_the_way_in_and_out_leave_nothing_held(
    private_redis: RedisProcess,
) -> None:
    # One kept connection: the acquisition cancelled while its script waits in Redis
    # gives its charges back once the reply comes, and the settle cancelled while it
    # waits for that connection still releases its slot when the connection is free.
    store = RedisCounterStore(private_redis.url, timeout=10.0, max_connections=1)
    admin = Redis.from_url(private_redis.url)
    slots = [InFlightCharge("inflight:k", 2)]
    # The cancelled acquisition's window and period charges (rpm, rpd, a budget) are
    # given back too: its request never ran, so nothing of it stays charged.
    counted = [
        WindowCharge("rpm:k", 1, 10),
        PeriodCharge("budget:k", 50, 1000, T0 + 60, T0 + 120, True),
    ]
    try:
        first = await store.acquire(slots, T0)
        assert first.lease is not None
        await admin.client_pause(400, all=False)  # scripts wait
        way_in = asyncio.create_task(store.acquire([*slots, *counted], T0))
        await scripts_waiting(admin, 1)
        way_out = asyncio.create_task(store.settle(first.lease, {}, T0))
        await asyncio.sleep(0.05)  # the settle waits for the one connection
        way_in.cancel()
        way_out.cancel()
        results = await asyncio.gather(way_in, way_out, return_exceptions=True)
        assert all(type(r) is asyncio.CancelledError for r in results)
        while store._pending:  # the work the cancelled callers left, then nothing held
            await asyncio.gather(*store._pending, return_exceptions=True)
        assert await store.read([*slots, *counted], T0) == (0, 0, 0)
    finally:
        await admin.aclose()
        await store.aclose()


async def test_a_burst_of_pooled_commands_waits_its_turn_and_never_opens_the_breaker(
    stores: StoreFactory,
) -> None:
    """Commands on pooled connections (a release, the usage reads, the response owners)
    past the pool's size wait for a turn within ``wait_timeout``: a healthy Redis is not
    taken for a failing one however many of this gateway's own commands queue."""
    store = stores(timeout=0.5, max_connections=3, wait_timeout=5.0)  # 2 pooled at once
    key = f"{store.prefix}never-pushed"

    def slow() -> Any:  # 0.3 s on the server, well within the 0.5 s timeout
        return store.guarded(lambda: store.client.blpop([key], timeout=0.3))

    # 9 at once: 2 a turn, 5 turns; a command that counted its wait under the timeout
    # would fail from the third turn on, and three failures open the breaker
    results = await asyncio.gather(*(slow() for _ in range(9)), return_exceptions=True)
    assert results == [None] * 9
    verdict = await store.acquire([WindowCharge("rpm:k", 1, 10)], T0)
    assert verdict.admitted


async def test_a_pooled_command_that_waits_out_its_turn_is_refused_alone(
    stores: StoreFactory,
) -> None:
    store = stores(timeout=0.5, max_connections=3, wait_timeout=0.4)
    key = f"{store.prefix}never-pushed"

    def slow() -> Any:
        return store.guarded(lambda: store.client.blpop([key], timeout=0.3))

    results = await asyncio.gather(*(slow() for _ in range(10)), return_exceptions=True)
    refused = [r for r in results if isinstance(r, StateUnavailable)]
    # the first turn at least is served (two fit in the 0.4 s wait on an idle machine),
    # every other call is refused: how many turns fit depends on the machine's load
    assert results.count(None) >= 3
    assert len(refused) == 10 - results.count(None) >= 1
    assert all("no Redis connection of this gateway came free" in str(r) for r in refused)
    # the refusals are none counted by the breaker: the next call goes through
    assert await store.guarded(lambda: store.client.ping()) is True
    assert (await store.acquire([WindowCharge("rpm:k", 1, 10)], T0)).admitted


@pytest.mark.parametrize(
    ("options", "evicts"),
    [
        ((), False),  # no memory bound: nothing is evicted
        (("--maxmemory", "64mb", "--maxmemory-policy", "noeviction"), False),
        (("--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"), True),
        # every key of the store has an expiry: volatile-* policies take them too
        (("--maxmemory", "64mb", "--maxmemory-policy", "volatile-ttl"), True),
    ],
)
async def test_a_redis_that_may_evict_the_counters_is_named_at_start(
    options: tuple[str, ...], evicts: bool, caplog: pytest.LogCaptureFixture
) -> None:
    with private_redis_server(extra=options) as server:
        store = RedisCounterStore(server.url, timeout=2.0)
        try:
            with caplog.at_level(logging.WARNING, logger="fairgate.state.redis"):
                await store.warn_of_eviction()
        finally:
            await store.aclose()
    warned = [r.getMessage() for r in caplog.records if "may evict" in r.getMessage()]
    if evicts:
        [message] = warned
        assert f"maxmemory-policy {options[-1]}" in message
        assert "maxmemory 67108864 bytes" in message
        assert "noeviction" in message  # what to set instead
        assert server.url not in message
    else:
        assert warned == []


async def test_an_unreachable_redis_at_start_is_a_warning_not_a_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = RedisCounterStore(f"redis://127.0.0.1:{free_port()}/0", timeout=0.5)
    try:
        with caplog.at_level(logging.WARNING, logger="fairgate.state.redis"):
            await store.warn_of_eviction()
        assert any(
            "could not read Redis's eviction policy" in r.getMessage() for r in caplog.records
        )
    finally:
        await store.aclose()


async def test_a_request_in_flight_across_a_flush_counts_once_in_the_new_day_counter(
    private_redis: RedisProcess,
) -> None:
    """Redis lost its data (FLUSHALL) while the first of a key's requests was in flight;
    its settle, finding the restore mark changed, adds its 1 to the day counter that the
    requests since recreated. That is no over-count: the flushed counter lost every
    request of the day, this one too, so the counter stays at most the true count (three
    requests, counted two); without the 1 a key at its cap of 3 would get a fourth."""
    store = RedisCounterStore(private_redis.url, timeout=5.0)
    limiter = Limiter(store)
    budget = Budget("team", "t", None, "month", max=Money(10**6))

    async def restore(now: float) -> None:
        await limiter.restore(budget, Money(0), now)
        await limiter.mark_restored(now)

    limiter.guard_budgets(restore)
    subject = Subject(key="k", org="o", team="t", project="p")
    limits = Limits(rpd=3)
    demand = Demand(subject, limits, "m", 1, Money(10), (budget,))
    now = time.time()
    try:
        await restore(now)
        first = await limiter.admit(demand, now)  # in flight across the flush
        second = await limiter.admit(demand, now)
        await limiter.settle(second, tokens=1, cost=Money(10), now=now)
        admin = Redis.from_url(private_redis.url)
        try:
            await admin.flushall()
        finally:
            await admin.aclose()
        third = await limiter.admit(demand, now)  # restores the mark, then is counted
        await limiter.settle(third, tokens=1, cost=Money(10), now=now)
        assert (await limiter.usage(subject, limits, (budget,), now)).requests_today == 1
        await limiter.settle(first, tokens=1, cost=Money(10), now=now)
        usage = await limiter.usage(subject, limits, (budget,), now)
        assert usage.requests_today == 2  # three were served today
        assert [b.spent.micro for b in usage.budgets] == [20]  # the third's and the first's
    finally:
        await store.aclose()
