"""The store's own EVALSHA path: the bytes it sends are redis-py's, and scripts run
pipelined on one kept connection, each caller given its own reply, loaded again after
NOSCRIPT (real Redis: 127.0.0.1:6379, or a private server where one is paused)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.connection import Connection
from redis.exceptions import ConnectionError, ResponseError

from fairgate.limits import StateUnavailable
from fairgate.state import RedisCounterStore
from fairgate.state.deadline import Deadline
from fairgate.state.scripts import Script, ScriptPipe
from redis_server import private_redis_server, scripts_waiting

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


@contextlib.asynccontextmanager
async def pipe_on(url: str, window: int = 8) -> AsyncIterator[ScriptPipe]:
    pool = BlockingConnectionPool.from_url(url, max_connections=4, timeout=1.0)
    pipe = ScriptPipe(pool, window)
    try:
        await pipe.connect()
        yield pipe
    finally:
        await pipe.aclose()
        assert len(pool._in_use_connections) == 0  # given back to the pool
        await pool.aclose()


async def run(pipe: ScriptPipe, script: Script, args: list[Any], seconds: float = 5.0) -> Any:
    """One call under a deadline of ``seconds``, as the store makes it."""
    deadline = Deadline(seconds)
    try:
        return await pipe.run(script, [], args, deadline)
    finally:
        deadline.close()


@pytest.mark.redis
async def test_a_script_runs_on_the_kept_connection_and_is_loaded_again_after_a_flush(
    redis_url: str,
) -> None:
    admin = Redis.from_url(redis_url)
    script = Script(ECHO)
    try:
        async with pipe_on(redis_url) as pipe:
            await admin.script_flush()
            deadline = Deadline(5.0)
            reply = await pipe.run(script, ["k"], ["é", 2, 0.5], deadline)  # NOSCRIPT: loaded
            deadline.close()
            assert reply == [1, b"k", "é".encode(), b"2", b"0.5"]
            assert await admin.script_exists(script.sha) == [True]
            assert await run(pipe, Script("return ARGV[1]"), ["x"]) == b"x"
            assert len(pipe._pool._in_use_connections) == 1  # type: ignore[attr-defined]
    finally:
        await admin.aclose()


@pytest.mark.redis
async def test_calls_made_together_go_out_in_one_write_and_each_gets_its_own_reply(
    redis_url: str,
) -> None:
    # a hundred callers at once on one connection: Redis reads their commands in a few
    # reads (not a hundred), and the replies, read in order, reach the right callers
    admin = Redis.from_url(redis_url)
    echo = Script("return ARGV[1]")
    try:
        async with pipe_on(redis_url, window=100) as pipe:
            await run(pipe, echo, ["warm"])
            before = (await admin.info("stats"))["total_reads_processed"]
            replies = await asyncio.gather(*(run(pipe, echo, [f"call-{n}"]) for n in range(100)))
            reads = (await admin.info("stats"))["total_reads_processed"] - before
            assert replies == [f"call-{n}".encode() for n in range(100)]
            assert reads < 10  # the admin's INFO is one of them
    finally:
        await admin.aclose()


@pytest.mark.redis
async def test_an_error_reply_goes_to_its_caller_alone() -> None:
    async with pipe_on("redis://127.0.0.1:6379") as pipe:
        failing = Script("return redis.error_reply('MYCODE went wrong')")
        echo = Script("return ARGV[1]")
        deadline = Deadline(5.0)
        replies = await asyncio.gather(
            run(pipe, echo, ["a"]),
            pipe.run(failing, [], [], deadline),
            run(pipe, echo, ["b"]),
            return_exceptions=True,
        )
        deadline.close()
        assert replies[0] == b"a" and replies[2] == b"b"
        assert isinstance(replies[1], ResponseError) and "MYCODE went wrong" in str(replies[1])
        assert await run(pipe, echo, ["c"]) == b"c"  # in step


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
    # Two calls in flight at most, twelve calls of 100 ms each at once: the last is
    # answered ~1.2 s after it was made, past the store's 1 s timeout, yet Redis answered
    # every call within ~0.2 s of its send. The wait for a place is the gateway's own
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
            assert replies[:2] == [b"0", b"1"]  # the two calls in flight
            for refused in replies[2:]:
                assert isinstance(refused, StateUnavailable)
                assert "came free within 0.1s" in str(refused)
            assert store.breaker.state == "closed"
            assert await store._call(busy, [], ["after", 0]) == b"after"  # at once, no probe
            assert store._scripts._places == 2  # no place lost to the refused calls
        finally:
            await store.aclose()


async def test_a_place_handed_to_a_call_cancelled_meanwhile_goes_to_the_next() -> None:
    pool = BlockingConnectionPool.from_url("redis://127.0.0.1:1", max_connections=2)
    pipe = ScriptPipe(pool, window=1)
    pipe.take()  # the one place, taken
    first = asyncio.create_task(pipe.wait())
    second = asyncio.create_task(pipe.wait())
    await asyncio.sleep(0)  # both waiting, in that order
    pipe.give_back()  # handed to the first ...
    first.cancel()  # ... which is cancelled before it runs again
    with pytest.raises(asyncio.CancelledError):
        await first
    await second  # handed on to the second
    third = asyncio.create_task(pipe.wait())
    await asyncio.sleep(0)
    third.cancel()  # cancelled while waiting: leaves the queue
    with pytest.raises(asyncio.CancelledError):
        await third
    pipe.give_back()
    assert pipe.room() and pipe._places == 1
    await pool.aclose()


@pytest.mark.redis
async def test_a_call_cancelled_before_its_reply_never_hands_that_reply_to_the_next_call() -> None:
    # The store bounds every call: a cancelled caller's reply still comes, and must go
    # to no one else, or the next request would read the previous one's verdict. The
    # connection stays (no reconnect). Redis held with CLIENT PAUSE (a private server).
    with private_redis_server() as server:
        admin = Redis.from_url(server.url)
        script = Script("return redis.call('ECHO', ARGV[1])")
        try:
            async with pipe_on(server.url) as pipe:
                assert await run(pipe, script, ["warm"]) == b"warm"  # loaded
                client = pipe._conn
                await admin.execute_command("CLIENT", "PAUSE", 300, "ALL")
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(run(pipe, script, ["first"]), 0.05)
                assert await run(pipe, script, ["second"]) == b"second"  # after the pause
                assert await run(pipe, script, ["third"]) == b"third"
                assert pipe.connected and pipe._conn is client
                assert not pipe._calls  # the first's reply came and was dropped
        finally:
            await admin.aclose()


@pytest.mark.redis
async def test_a_silent_connection_is_dropped_when_a_bound_runs_out_and_connected_again() -> None:
    # Nothing at all came back since the call was sent: whatever the reason (Redis
    # stopped, the path to it gone), the next call must not queue behind it
    with private_redis_server() as server:
        admin = Redis.from_url(server.url)
        echo = Script("return ARGV[1]")
        try:
            async with pipe_on(server.url) as pipe:
                await run(pipe, echo, ["warm"])
                connections = (await admin.info("stats"))["total_connections_received"]
                await admin.client_pause(400, all=False)  # scripts wait, INFO does not
                with pytest.raises(asyncio.CancelledError):
                    await run(pipe, echo, ["lost"], seconds=0.1)
                assert not pipe.connected
                await pipe.connect()
                assert await run(pipe, echo, ["again"]) == b"again"  # after the pause
                stats = await admin.info("stats")
                assert stats["total_connections_received"] == connections + 1  # a new one
        finally:
            await admin.aclose()


@pytest.mark.redis
async def test_a_late_call_behind_others_that_are_answered_keeps_the_connection() -> None:
    # three 100 ms scripts, each sent in a loop turn of its own: Redis answers them at
    # ~100, ~200 and ~300 ms. The third's bound (250 ms) runs out while the first two
    # replies come back, so Redis is alive: the connection stays, and in step.
    with private_redis_server() as server:
        busy = Script(BUSY)
        async with pipe_on(server.url) as pipe:
            await run(pipe, busy, ["warm", 0])
            reader = pipe._reader
            calls = []
            for n, seconds in ((1, 5.0), (2, 5.0), (3, 0.25)):
                calls.append(asyncio.create_task(run(pipe, busy, [str(n), 100_000], seconds)))
                await asyncio.sleep(0.01)
            replies = await asyncio.gather(*calls, return_exceptions=True)
            assert replies[:2] == [b"1", b"2"]
            assert isinstance(replies[2], asyncio.CancelledError)
            assert pipe.connected and pipe._reader is reader
            assert await run(pipe, busy, ["after", 0]) == b"after"


@pytest.mark.redis
async def test_a_connection_killed_fails_every_call_in_flight_and_the_next_reconnects() -> None:
    with private_redis_server() as server:
        admin = Redis.from_url(server.url)
        echo = Script("return ARGV[1]")
        try:
            async with pipe_on(server.url) as pipe:
                await run(pipe, echo, ["warm"])
                await admin.client_pause(2000, all=False)  # scripts wait, INFO does not
                calls = [asyncio.create_task(run(pipe, echo, [str(n)])) for n in range(5)]
                await scripts_waiting(admin, 1)
                await admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
                failed = await asyncio.gather(*calls, return_exceptions=True)
                assert all(isinstance(f, ConnectionError) for f in failed), failed
                assert not pipe.connected
                await admin.execute_command("CLIENT", "UNPAUSE")
                await pipe.connect()
                assert await run(pipe, echo, ["again"]) == b"again"
        finally:
            await admin.aclose()
