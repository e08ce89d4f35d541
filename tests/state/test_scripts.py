"""The store's own EVALSHA path: the bytes it sends are redis-py's, and a script runs
on a kept connection, loaded again after NOSCRIPT (real Redis at 127.0.0.1:6379)."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.connection import Connection

from fairgate.limits import StateUnavailable
from fairgate.state import RedisCounterStore
from fairgate.state.scripts import Script, ScriptRunner
from redis_server import private_redis_server

ECHO = "return {#KEYS, KEYS[1], ARGV[1], ARGV[2], ARGV[3]}"


@pytest.mark.parametrize(
    ("keys", "args"),
    [
        ([], []),
        (["fairgate:rpm:k"], ["w", 1, 1000, repr(60.0), 6, 0]),
        (["fairgate:budget:team:é:*:m:d"], ["ünïcode", 1.5, -3, "", "a b"]),
    ],
)
def test_the_command_is_packed_as_redis_py_packs_it(keys: list[str], args: list[object]) -> None:
    script = Script(ECHO)
    expected = b"".join(Connection().pack_command("EVALSHA", script.sha, len(keys), *keys, *args))
    assert script.pack(keys, args) == expected  # type: ignore[arg-type]


def test_the_command_is_packed_right_while_its_words_churn_through_the_memo() -> None:
    # the bulk strings are memoised: words that change every call (lease ids, the time)
    # fill the memo and empty it, and no stale or mixed-up word may come out of that
    script = Script(ECHO)
    for call in range(3000):
        keys = [f"fairgate:rpm:k{call % 7}", "fairgate:budget:é"]
        args: list[str | int | float] = [1.5 + call, f"lease-{call}", call % 3, "ü" * (call % 4)]
        expected = b"".join(Connection().pack_command("EVALSHA", script.sha, 2, *keys, *args))
        assert script.pack(keys, args) == expected


@pytest.mark.redis
async def test_a_script_runs_on_a_kept_connection_and_is_loaded_again_after_a_flush(
    redis_url: str,
) -> None:
    pool = BlockingConnectionPool.from_url(redis_url, max_connections=4, timeout=1.0)
    admin = Redis.from_url(redis_url)
    runner = ScriptRunner(pool, pinned=1)
    script = Script(ECHO)
    try:
        await admin.script_flush()
        conn = await runner.open()
        reply = await runner.run_on(conn, script, ["k"], ["é", 2, 0.5])  # NOSCRIPT: loaded, again
        assert reply == [1, b"k", "é".encode(), b"2", b"0.5"]
        assert await admin.script_exists(script.sha) == [True]
        runner.give_back(conn)
        assert not runner.room() and runner.free == [conn]  # kept: the next call takes it
        assert await runner.run_on(conn, script, ["k"], ["x", 1, 2]) == [1, b"k", b"x", b"1", b"2"]
        # one connection taken out of the pool and kept, none given back between calls
        assert len(pool._in_use_connections) == 1
    finally:
        await runner.aclose()
        assert len(pool._in_use_connections) == 0
        await admin.aclose()
        await pool.aclose()


# Holds Redis for ARGV[2] µs (Redis runs one script at a time), then answers ARGV[1].
BUSY = """
local start = redis.call('TIME')
repeat
  local now = redis.call('TIME')
until (now[1] - start[1]) * 1000000 + (now[2] - start[2]) >= tonumber(ARGV[2])
return ARGV[1]
"""


@pytest.mark.redis
async def test_a_burst_past_the_kept_connections_queues_and_never_opens_the_breaker() -> None:
    # Two kept connections, twelve calls of 100 ms each at once: the last is answered
    # ~1.2 s after it was made, past the store's 1 s timeout, yet Redis answered every
    # call within ~0.2 s of its send. The wait for a connection is the gateway's own
    # queue, not a Redis failure (a private server: the busy scripts hold all of Redis).
    with private_redis_server() as server:
        store = RedisCounterStore(server.url, timeout=1.0, max_connections=2)
        busy = Script(BUSY)
        answered: list[bytes] = []

        async def call(n: int) -> None:
            answered.append(await store._call(busy, [], [str(n), 100_000]))

        try:
            await call(-1)  # the script loaded
            await asyncio.gather(*(call(n) for n in range(12)))
            assert sorted(answered[1:], key=int) == [b"%d" % n for n in range(12)]
            assert store.breaker.state == "closed" and store.breaker.consecutive_failures == 0
        finally:
            await store.aclose()


@pytest.mark.redis
async def test_a_wait_that_runs_out_refuses_that_call_alone() -> None:
    with private_redis_server() as server:
        store = RedisCounterStore(server.url, timeout=2.0, max_connections=2, wait_timeout=0.1)
        busy = Script(BUSY)
        try:
            await store._call(busy, [], ["warm", 0])
            replies = await asyncio.gather(
                *(store._call(busy, [], [str(n), 200_000]) for n in range(5)),
                return_exceptions=True,
            )
            assert replies[:2] == [b"0", b"1"]  # on the two kept connections
            for refused in replies[2:]:
                assert isinstance(refused, StateUnavailable)
                assert "came free within 0.1s" in str(refused)
            assert store.breaker.state == "closed"
            assert await store._call(busy, [], ["after", 0]) == b"after"  # at once, no probe
            assert len(store._scripts.free) == 2  # no connection lost to the refused calls
        finally:
            await store.aclose()


async def test_a_connection_handed_to_a_call_cancelled_meanwhile_goes_to_the_next() -> None:
    pool = BlockingConnectionPool.from_url("redis://127.0.0.1:1", max_connections=2)
    runner = ScriptRunner(pool, pinned=1)
    conn = Connection()
    first = asyncio.create_task(runner.wait())
    second = asyncio.create_task(runner.wait())
    await asyncio.sleep(0)  # both waiting, in that order
    runner.give_back(conn)  # handed to the first ...
    first.cancel()  # ... which is cancelled before it runs again
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await second is conn
    third = asyncio.create_task(runner.wait())
    await asyncio.sleep(0)
    third.cancel()  # cancelled while waiting: leaves the queue
    with pytest.raises(asyncio.CancelledError):
        await third
    runner.give_back(conn)
    assert runner.free == [conn]
    await pool.aclose()


@pytest.mark.redis
async def test_a_call_cancelled_before_its_reply_never_hands_that_reply_to_the_next_call() -> None:
    # The store bounds every call with its timeout: a cancelled read must not leave its
    # reply on the kept connection, or the next request would read the previous one's
    # verdict. Redis is held with CLIENT PAUSE (a private server: the pause is global).
    with private_redis_server() as server:
        pool = BlockingConnectionPool.from_url(server.url, max_connections=4, timeout=1.0)
        admin = Redis.from_url(server.url)
        runner = ScriptRunner(pool, pinned=1)
        script = Script("return redis.call('ECHO', ARGV[1])")
        try:
            conn = await runner.open()
            assert await runner.run_on(conn, script, [], ["warm"]) == b"warm"  # loaded
            await admin.execute_command("CLIENT", "PAUSE", 300, "ALL")
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(runner.run_on(conn, script, [], ["first"]), 0.05)
            await asyncio.sleep(0.4)  # the pause is over: "first" may have run by now
            assert await runner.run_on(conn, script, [], ["second"]) == b"second"
            assert await runner.run_on(conn, script, [], ["third"]) == b"third"
            runner.give_back(conn)
            assert len(pool._in_use_connections) == 1  # still the one kept connection
        finally:
            await runner.aclose()
            await admin.aclose()
            await pool.aclose()
