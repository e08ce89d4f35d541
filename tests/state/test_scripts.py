"""The store's own EVALSHA path: the bytes it sends are redis-py's, and a script runs
on a kept connection, loaded again after NOSCRIPT (real Redis at 127.0.0.1:6379)."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.connection import Connection

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
        reply = await runner.run(script, ["k"], ["é", 2, 0.5])  # NOSCRIPT: loaded, run again
        assert reply == [1, b"k", "é".encode(), b"2", b"0.5"]
        assert await admin.script_exists(script.sha) == [True]
        assert await runner.run(script, ["k"], ["x", 1, 2]) == [1, b"k", b"x", b"1", b"2"]
        # one connection taken out of the pool and kept, none given back between calls
        assert len(pool._in_use_connections) == 1
    finally:
        await runner.aclose()
        assert len(pool._in_use_connections) == 0
        await admin.aclose()
        await pool.aclose()


@pytest.mark.redis
async def test_calls_past_the_kept_connections_borrow_from_the_pool_and_give_back(
    redis_url: str,
) -> None:
    pool = BlockingConnectionPool.from_url(redis_url, max_connections=4, timeout=1.0)
    runner = ScriptRunner(pool, pinned=1)
    script = Script("return redis.call('ECHO', ARGV[1])")
    try:
        replies = await asyncio.gather(*(runner.run(script, [], [str(i)]) for i in range(3)))
        assert replies == [b"0", b"1", b"2"]
        assert len(pool._in_use_connections) == 1  # the kept one; two went back
        assert len(pool._available_connections) == 2
    finally:
        await runner.aclose()
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
            assert await runner.run(script, [], ["warm"]) == b"warm"  # loaded, connection kept
            await admin.execute_command("CLIENT", "PAUSE", 300, "ALL")
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(runner.run(script, [], ["first"]), 0.05)
            await asyncio.sleep(0.4)  # the pause is over: "first" may have run by now
            assert await runner.run(script, [], ["second"]) == b"second"
            assert await runner.run(script, [], ["third"]) == b"third"
            assert len(pool._in_use_connections) == 1  # still the one kept connection
        finally:
            await runner.aclose()
            await admin.aclose()
            await pool.aclose()
