"""The EVALSHA path's own reply parser against a real redis-server: every reply shape
our scripts and commands can give comes back as redis-py's reader gives it, errors
as redis-py's exceptions, a reply split across reads is read whole, and a caller that
holds its cancellation learns what its script did."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any

import pytest
from redis.asyncio import BlockingConnectionPool, Redis
from redis.exceptions import (
    ConnectionError,
    InvalidResponse,
    NoScriptError,
    OutOfMemoryError,
    ResponseError,
)

from fairgate.state.deadline import Deadline
from fairgate.state.replies import ReplyThenCancelled, parse
from fairgate.state.scripts import Arg, Script, ScriptPipe
from redis_server import RedisProcess, private_redis_server, scripts_waiting

pytestmark = pytest.mark.redis

SHAPES = [
    "return 7",
    "return -12345678901234",
    "return 'é bulk\\r\\nwith a line break'",
    "return ''",
    "return false",
    "return nil",
    "return true",
    "return {}",
    "return {1, 'two', {3, {'four', {}}, 5}, 6}",
    "return {ok = 'FINE'}",
    "return {1, redis.pcall('INCR', KEYS[1]), 3}",  # an error inside an array
    "return redis.call('HGETALL', KEYS[2])",
    "return redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')",
    "return {string.rep('x', 200000), 'end'}",  # more than one read's worth
    "redis.setresp(3); return redis.call('HGETALL', KEYS[2])",  # a map
    "redis.setresp(3); return {double = 3.25}",
    "redis.setresp(3); return {1, {double = -0.5}, false, true}",
]


@pytest.fixture(scope="module")
def server() -> Iterator[RedisProcess]:
    with private_redis_server() as server:
        yield server


@pytest.fixture
async def redis(server: RedisProcess) -> AsyncIterator[Redis]:
    client = Redis.from_url(server.url)
    await client.flushall()
    await client.set("text", "not a number")
    await client.hset("hash", mapping={"a": "1", "b": "two"})
    await client.zadd("zset", {"m": 1.5, "n": 2})
    yield client
    await client.aclose()


async def run(pipe: ScriptPipe, script: Script, keys: list[str], args: list[Arg]) -> Any:
    """One call as the store makes it: a place taken, under a deadline."""
    pipe.take()
    deadline = Deadline(5.0)
    try:
        return await pipe.run(script, keys, args, deadline)
    finally:
        deadline.close()


@contextlib.asynccontextmanager
async def pipe_on(url: str, bound: float = 5.0) -> AsyncIterator[ScriptPipe]:
    pool = BlockingConnectionPool.from_url(url, max_connections=2, timeout=1.0)
    pipe = ScriptPipe(pool, window=4, bound=bound)
    try:
        await pipe.connect()
        yield pipe
    finally:
        await pipe.aclose()
        await pool.aclose()


@pytest.mark.parametrize("text", SHAPES)
async def test_every_reply_shape_comes_back_as_redis_py_reads_it(
    server: RedisProcess, redis: Redis, text: str
) -> None:
    keys = ["text", "hash", "zset"]
    expected = await redis.eval(text, len(keys), *keys)
    async with pipe_on(server.url) as pipe:
        got = await run(pipe, Script(text), keys, [])
    assert _plain(got) == _plain(expected)


async def test_error_replies_raise_redis_py_s_exceptions(
    server: RedisProcess, redis: Redis
) -> None:
    async with pipe_on(server.url) as pipe:
        with pytest.raises(ResponseError, match="not an integer"):
            await run(pipe, Script("return redis.call('INCR', KEYS[1])"), ["text"], [])
        with pytest.raises(ResponseError, match="MYCODE went wrong") as raised:
            await run(pipe, Script("return {err = 'MYCODE went wrong'}"), [], [])
        assert type(raised.value) is ResponseError
        # the connection is still good after an error reply
        assert await run(pipe, Script("return 1"), [], []) == 1


async def test_noscript_is_no_script_error(server: RedisProcess, redis: Redis) -> None:
    pool = BlockingConnectionPool.from_url(server.url, max_connections=1, timeout=1.0)
    conn = await pool.get_connection()
    try:
        await conn.send_packed_command(Script("return 'never loaded'").pack([], []))
        assert conn._reader is not None
        data = await conn._reader.read(65536)
        parsed = parse(data)
        assert parsed is not None and isinstance(parsed[0], NoScriptError)
        assert parsed[1] == len(data)  # an error reply is a whole reply
    finally:
        await pool.release(conn)
        await pool.aclose()


async def test_out_of_memory_raises_out_of_memory_error(server: RedisProcess, redis: Redis) -> None:
    await redis.config_set("maxmemory", 1)
    try:
        async with pipe_on(server.url) as pipe:
            with pytest.raises(OutOfMemoryError):
                await run(pipe, Script("return redis.call('SET', KEYS[1], 'v')"), ["k"], [])
    finally:
        await redis.config_set("maxmemory", 0)


async def test_a_busy_server_s_error_is_raised_and_the_connection_serves_the_next_call(
    server: RedisProcess, redis: Redis
) -> None:
    await redis.config_set("busy-reply-threshold", 50)
    spin = "while true do redis.call('TIME') end"  # read-only: SCRIPT KILL ends it
    killer = Redis.from_url(server.url)
    try:
        async with pipe_on(server.url) as pipe:
            busy = asyncio.ensure_future(redis.eval(spin, 0))
            await asyncio.sleep(0.1)  # the spin has started
            with pytest.raises(ResponseError, match=r"^BUSY"):
                await run(pipe, Script("return 2"), [], [])
            await killer.script_kill()
            with pytest.raises(ResponseError):
                await busy
            assert await run(pipe, Script("return 2"), [], []) == 2
    finally:
        await killer.aclose()
        await redis.config_set("busy-reply-threshold", 5000)


async def test_a_reply_split_across_reads_is_read_whole(server: RedisProcess, redis: Redis) -> None:
    # a proxy that hands the server's bytes on one at a time, each its own write
    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while byte := await reader.read(1):
            writer.write(byte)
            await writer.drain()
            await asyncio.sleep(0)
        writer.close()

    async def relay(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", server.port)
        await asyncio.gather(pipe(client_r, server_w), pipe(server_r, client_w))

    proxy = await asyncio.start_server(relay, "127.0.0.1", 0)
    port = proxy.sockets[0].getsockname()[1]
    text = "return {1, 'two', {3, {'four'}}, redis.call('HGETALL', KEYS[1]), false}"
    try:
        async with pipe_on(f"redis://127.0.0.1:{port}") as pipe:
            got = await run(pipe, Script(text), ["hash"], [])
    finally:
        proxy.close()
    assert got == [1, b"two", [3, [b"four"]], [b"a", b"1", b"b", b"two"], None]


INCR = Script("return redis.call('INCR', KEYS[1])")


async def _held_call(pipe: ScriptPipe, seconds: float) -> Any:
    """INCR of ``counter`` as the store's way in runs it: under a deadline of
    ``seconds`` that holds any other cancellation until the reply."""
    pipe.take()
    deadline = Deadline(seconds)
    try:
        return await pipe.run(INCR, ["counter"], [], deadline, hold=True)
    finally:
        deadline.close()


async def _cancelled_in_redis(
    redis: Redis, call: Coroutine[Any, Any, Any]
) -> tuple[asyncio.Task[Any], BaseException]:
    """``call`` started while the (paused) server holds scripts, cancelled once it waits
    there: its task and what it raised."""
    task = asyncio.create_task(call)
    await scripts_waiting(redis, 1)
    task.cancel()
    try:
        await task
    except BaseException as exc:
        return task, exc
    raise AssertionError("the cancelled call returned")


async def test_a_held_cancellation_comes_after_the_reply_and_leaves_the_connection_in_step(
    server: RedisProcess, redis: Redis
) -> None:
    # a caller gone while its charge is in Redis must learn what the script did
    async with pipe_on(server.url) as pipe:
        await run(pipe, INCR, ["warm"], [])  # loaded: no NOSCRIPT on the way
        await redis.client_pause(300, all=False)  # scripts wait
        call, raised = await _cancelled_in_redis(redis, _held_call(pipe, 10.0))
        assert isinstance(raised, ReplyThenCancelled) and call.cancelled()
        assert raised.reply == 1  # what the script did, read after the cancellation
        assert await run(pipe, INCR, ["counter"], []) == 2


async def test_a_call_without_hold_is_cancelled_at_once_and_its_reply_dropped(
    server: RedisProcess, redis: Redis
) -> None:
    async with pipe_on(server.url) as pipe:
        await run(pipe, INCR, ["warm"], [])  # loaded: no NOSCRIPT on the way
        await redis.client_pause(300, all=False)
        reader = pipe._reader
        _, raised = await _cancelled_in_redis(redis, run(pipe, INCR, ["counter"], []))
        assert type(raised) is asyncio.CancelledError
        # the script ran once the pause ended; its reply went to no one, and the next
        # call reads its own on the same connection
        assert await run(pipe, INCR, ["counter"], []) == 2
        assert pipe._reader is reader


async def test_the_deadline_s_own_cancellation_is_never_held(
    server: RedisProcess, redis: Redis
) -> None:
    # the hold waits for the reply no longer than the call's bound, and a cancellation
    # held meanwhile is still the caller's: raised, not lost
    async with pipe_on(server.url, bound=0.2) as pipe:
        await run(pipe, INCR, ["warm"], [])
        await redis.client_pause(3000, all=False)
        try:  # held at first: the deadline is still to come
            call, raised = await _cancelled_in_redis(redis, _held_call(pipe, 0.2))
            assert type(raised) is asyncio.CancelledError  # no reply came
            assert call.cancelled()
            await asyncio.sleep(0.1)  # nothing back for a whole bound since the write
            assert not pipe.connected  # dropped
        finally:
            await redis.execute_command("CLIENT", "UNPAUSE")


def test_a_reply_s_every_beginning_is_incomplete_and_the_whole_is_parsed() -> None:
    reply = b"*3\r\n:1\r\n%1\r\n+k\r\n$5\r\na\r\nbc\r\n*2\r\n_\r\n,2.5\r\n"
    for end in range(len(reply)):
        assert parse(reply[:end]) is None
    assert parse(reply) == ([1, {b"k": b"a\r\nbc"}, [None, 2.5]], len(reply))
    assert parse(reply + b":9\r\n") == ([1, {b"k": b"a\r\nbc"}, [None, 2.5]], len(reply))
    # pipelined: the next reply parsed from where the first ended
    assert parse(reply + b":9\r\n", len(reply)) == (9, len(reply) + 4)


def test_a_push_message_ahead_of_the_reply_is_skipped_and_garbage_refused() -> None:
    pushed = b">2\r\n+invalidate\r\n*1\r\n$1\r\nk\r\n:5\r\n"
    assert parse(pushed) == (5, len(pushed))
    with pytest.raises(InvalidResponse):
        parse(b"?what\r\n")


def test_an_error_of_redis_py_s_connection_kind_is_raised_at_once() -> None:
    with pytest.raises(ConnectionError):
        parse(b"-ERR max number of clients reached\r\n")


def _plain(value: object) -> object:
    """Error instances compared by type and text."""
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, Exception):
        return (type(value), str(value))
    return value
