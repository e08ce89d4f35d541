"""Guess counters on memory and on Redis: per address, per network, shared by replicas."""

from __future__ import annotations

import asyncio
import socket
import uuid

import pytest
from redis.asyncio import Redis

from fairgate.accounts import Guesses, TooManyGuesses
from fairgate.accounts.guesses import address_key
from fairgate.core.errors import ServiceUnavailable
from fairgate.limits import CounterStore
from fairgate.state import RedisCounterStore
from limits.conftest import store
from redis_keys import delete_prefix
from store.backends import FakeClock

__all__ = ["store"]  # the fixture: the counter store, on memory and on Redis

ALICE = "alice@example.org"


def _guesses(state: CounterStore, clock: FakeClock, **options: object) -> Guesses:
    settings: dict[str, object] = {"per_address": 3, "per_network": 5, "window": 900.0}
    settings.update(options)
    return Guesses(state, clock=clock, **settings)  # type: ignore[arg-type]


async def test_an_address_gets_its_guesses_from_anywhere_then_waits(
    store: CounterStore,
) -> None:
    clock = FakeClock()
    guesses = _guesses(store, clock)
    for n in range(3):
        await guesses.attempt(ALICE, f"198.51.100.{n}")
    with pytest.raises(TooManyGuesses) as limited:
        await guesses.attempt(ALICE, "203.0.113.1")
    assert 0 < limited.value.retry_after <= 900 * 1.1  # the window plus a granule at most
    await guesses.attempt("bob@example.org", "203.0.113.1")  # another address: its own count
    clock.advance(limited.value.retry_after + 1)
    await guesses.attempt(ALICE, "203.0.113.1")


async def test_a_network_meets_its_ceiling_across_addresses(store: CounterStore) -> None:
    guesses = _guesses(store, FakeClock())
    for n in range(5):
        await guesses.attempt(f"user{n}@example.org", "2001:db8::1")
    with pytest.raises(TooManyGuesses):
        await guesses.attempt("fresh@example.org", "2001:db8::beef")  # same /64
    await guesses.attempt("fresh@example.org", "2001:db8:0:1::1")  # another /64


async def test_a_refunded_attempt_does_not_count(store: CounterStore) -> None:
    guesses = _guesses(store, FakeClock())
    for _ in range(10):
        await guesses.refund(await guesses.attempt(ALICE, "192.0.2.1"))
    await guesses.attempt(ALICE, "192.0.2.1")


async def test_concurrent_attempts_never_pass_the_limit(store: CounterStore) -> None:
    guesses = _guesses(store, FakeClock(), per_address=3, per_network=1000)
    outcomes = await asyncio.gather(
        *(guesses.attempt(ALICE, f"198.51.100.{n}") for n in range(50)), return_exceptions=True
    )
    assert sum(not isinstance(o, BaseException) for o in outcomes) == 3
    assert all(isinstance(o, TooManyGuesses) for o in outcomes if isinstance(o, BaseException))


@pytest.mark.redis
async def test_replicas_sharing_redis_share_the_counts(redis_url: str) -> None:
    prefix = f"fgtest:{uuid.uuid4().hex}:"
    one = RedisCounterStore(redis_url, prefix=prefix, timeout=5.0)
    two = RedisCounterStore(redis_url, prefix=prefix, timeout=5.0)
    clock = FakeClock()
    try:
        first, second = _guesses(one, clock), _guesses(two, clock)
        await first.attempt(ALICE, "198.51.100.1")
        await second.attempt(ALICE, "198.51.100.2")
        await first.attempt(ALICE, "198.51.100.3")
        with pytest.raises(TooManyGuesses):
            await second.attempt(ALICE, "198.51.100.4")
        client = Redis.from_url(redis_url)
        try:
            stored = [key async for key in client.scan_iter(match=f"{prefix}*")]
        finally:
            await client.aclose()
        assert stored and not any(b"alice" in key for key in stored)  # only its hash
        assert any(address_key(ALICE).encode() in key for key in stored)
    finally:
        await one.aclose()
        await two.aclose()
        await delete_prefix(redis_url, prefix)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_without_its_redis_sign_in_is_refused_unless_fail_open() -> None:
    dead = RedisCounterStore(f"redis://127.0.0.1:{_closed_port()}/0", timeout=0.2)
    try:
        with pytest.raises(ServiceUnavailable):
            await _guesses(dead, FakeClock()).attempt(ALICE, "192.0.2.1")
        ticket = await _guesses(dead, FakeClock(), fail_open=True).attempt(ALICE, "192.0.2.1")
        assert ticket is None
    finally:
        await dead.aclose()
