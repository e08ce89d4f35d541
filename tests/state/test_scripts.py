"""The store's own EVALSHA path: the bytes it sends are redis-py's, and scripts run
pipelined on one kept connection, each caller given its own reply, loaded again after
NOSCRIPT (real Redis: 127.0.0.1:6379, or a private server where one is paused)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.connection import Connection
from redis.exceptions import ConnectionError, NoScriptError, ResponseError

from fairgate.core.breaker import Breaker
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
async def pipe_on(url: str, window: int = 8, bound: float = 5.0) -> AsyncIterator[ScriptPipe]:
    pool = BlockingConnectionPool.from_url(url, max_connections=4, timeout=1.0)
    pipe = ScriptPipe(pool, window, bound)
    try:
        await pipe.connect()
        yield pipe
    finally:
        await pipe.aclose()
        assert len(pool._in_use_connections) == 0  # given back to the pool
        await pool.aclose()


async def place(pipe: ScriptPipe) -> None:
    """A place among the commands in flight, as the store takes one before a call."""
    if pipe.room():
        pipe.take()
    else:
        await pipe.wait()


async def run(pipe: ScriptPipe, script: Script, args: list[Any], seconds: float = 5.0) -> Any:
    """One call under a deadline of ``seconds``, as the store makes it."""
    await place(pipe)
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
            await place(pipe)
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
        await place(pipe)
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
    pipe = ScriptPipe(pool, window=1, bound=5.0)
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
    # Nothing at all came back for a whole bound (0.1 s) since the call was written:
    # whatever the reason (Redis stopped, the path to it gone), the connection is
    # dropped, however long its caller would wait, and the next call connects again
    with private_redis_server() as server:
        admin = Redis.from_url(server.url)
        echo = Script("return ARGV[1]")
        try:
            async with pipe_on(server.url, bound=0.1) as pipe:
                await run(pipe, echo, ["warm"])
                connections = (await admin.info("stats"))["total_connections_received"]
                await admin.client_pause(400, all=False)  # scripts wait, INFO does not
                with pytest.raises(ConnectionError, match="no reply from Redis within"):
                    await run(pipe, echo, ["lost"], seconds=5.0)  # ended by the watch
                assert not pipe.connected
                await asyncio.sleep(0.35)  # the pause is over
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


async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, delay: float = 0) -> None:
    """Hand what ``src`` reads on to ``dst`` (each read ``delay`` s late), then close it."""
    try:
        while data := await src.read(65536):
            await asyncio.sleep(delay)
            dst.write(data)
    finally:
        dst.close()


# -- attacks on the pipe: a caller must never lose a reply Redis sent in time, and a
# gateway-side stall, an abandoned caller or a silent peer must cost only what they must


@pytest.mark.redis
async def test_a_reply_read_in_the_turn_the_deadline_cancels_is_in_time() -> None:
    # The loop is busy for 100 ms right after the write (a burst's work in one turn);
    # Redis answers within a millisecond, but the 50 ms deadline falls due in the same
    # turn as the reply is read. A holding caller (the way in) gets its reply, so its
    # charge is known, and the breaker counts nothing.
    with private_redis_server() as server:
        incr = Script("return redis.call('INCR', KEYS[1])")
        for attempt in range(1, 4):
            store = RedisCounterStore(server.url, timeout=0.05, max_connections=4)
            try:
                await store._call(incr, ["warm"], [])
                pipe = store._scripts
                flush = pipe._flush

                def stalled_flush(flush: Any = flush, pipe: ScriptPipe = pipe) -> None:
                    flush()
                    pipe._flush = flush  # type: ignore[method-assign]  # once
                    time.sleep(0.1)

                pipe._flush = stalled_flush  # type: ignore[method-assign]
                assert await store._call(incr, ["counter"], [], hold=True) == attempt
                assert store.breaker.consecutive_failures == 0
            finally:
                await store.aclose()


@pytest.mark.redis
async def test_a_turn_that_runs_long_before_the_write_does_not_drop_the_connection() -> None:
    # Ten calls made in one turn that then works 0.6 s (the bound is 0.5 s): their
    # write goes out after it. They may time out (the gateway's own stall took their
    # time), but Redis ran each once and answered at once: the connection is not taken
    # for silent, and the next call reads its own reply on it.
    with private_redis_server() as server:
        store = RedisCounterStore(server.url, timeout=0.5, breaker=Breaker(failures=100))
        incr = Script("return redis.call('INCR', KEYS[1])")

        async def call(n: int) -> object:
            try:
                return await store._call(incr, [f"k{n}"], [])
            except StateUnavailable as refused:
                return refused

        try:
            await call(-1)
            reader = store._scripts._reader
            calls = [asyncio.create_task(call(n)) for n in range(10)]
            asyncio.get_running_loop().call_soon(time.sleep, 0.6)
            for result in await asyncio.gather(*calls):
                assert result == 1 or "no answer within 0.5s" in str(result)
            await asyncio.sleep(0.6)  # past a whole bound since the write
            assert await store.client.mget([f"k{n}" for n in range(10)]) == [b"1"] * 10
            assert store._scripts._reader is reader  # the same connection
            assert await call(0) == 2
        finally:
            await store.aclose()


@pytest.mark.redis
async def test_a_handshake_that_never_answers_is_bounded_and_the_next_connect_tries_again() -> None:
    # The first connection meets a peer that accepts and never answers (a frozen host,
    # a path gone after the SYN-ACK); every later one reaches Redis. Only the call that
    # met the black hole fails.
    with private_redis_server() as server:
        accepted = 0

        async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal accepted
            accepted += 1
            try:
                if accepted == 1:  # the black hole: reads, never answers
                    while await reader.read(65536):
                        pass
                    return
                up_r, up_w = await asyncio.open_connection("127.0.0.1", server.port)
                await asyncio.gather(pump(reader, up_w), pump(up_r, writer), return_exceptions=True)
            finally:
                writer.close()

        proxy = await asyncio.start_server(relay, "127.0.0.1", 0)
        port = proxy.sockets[0].getsockname()[1]
        store = RedisCounterStore(
            f"redis://127.0.0.1:{port}", timeout=0.2, breaker=Breaker(failures=100)
        )
        echo = Script("return ARGV[1]")
        try:
            with pytest.raises(StateUnavailable):
                await store._call(echo, [], ["first"])
            assert [await store._call(echo, [], [str(n)]) for n in range(3)] == [b"0", b"1", b"2"]
        finally:
            await store.aclose()
            proxy.close()


@pytest.mark.redis
async def test_commands_abandoned_by_their_callers_keep_their_places_until_answered() -> None:
    # Callers gone after 5 ms (a client that left: no hold) while Redis is held: their
    # commands stay queued on the connection, so they keep their places, and the
    # window (3) bounds what waits in Redis; the next call is not queued behind dozens.
    with private_redis_server() as server:
        admin = Redis.from_url(server.url)
        store = RedisCounterStore(server.url, timeout=2.0, max_connections=4, wait_timeout=1.0)
        echo = Script("return ARGV[1]")
        try:
            await store._call(echo, [], ["warm"])
            await admin.client_pause(300, all=False)
            for wave in range(5):
                gone = [
                    asyncio.wait_for(store._call(echo, [], [f"{wave}-{n}"]), 0.005)
                    for n in range(4)
                ]
                for result in await asyncio.gather(*gone, return_exceptions=True):
                    assert isinstance(result, TimeoutError | StateUnavailable)
                assert len(store._scripts._calls) <= 3
            assert await store._call(echo, [], ["next"]) == b"next"  # after the pause
            assert store._scripts._places == 3 and not store._scripts._calls
        finally:
            await store.aclose()
            await admin.aclose()


@pytest.mark.redis
async def test_every_caller_of_a_silent_redis_gets_state_unavailable() -> None:
    # Redis held: forty calls one loop turn apart, each past its bound; the connection
    # is dropped as silent while some are still in flight. Each caller gets the store's
    # own error, none a bare cancellation (which would read as the client gone).
    with private_redis_server() as server:
        admin = Redis.from_url(server.url)
        store = RedisCounterStore(server.url, timeout=0.3, breaker=Breaker(failures=100))
        echo = Script("return ARGV[1]")

        async def call(n: int) -> object:
            try:
                return await store._call(echo, [], [str(n)])
            except asyncio.CancelledError:
                return "a bare cancellation"
            except StateUnavailable as refused:
                return type(refused)

        try:
            await call(-1)
            await admin.client_pause(1500, all=False)
            calls = []
            for n in range(40):
                calls.append(asyncio.create_task(call(n)))
                await asyncio.sleep(0)
            assert await asyncio.gather(*calls) == [StateUnavailable] * 40
        finally:
            await admin.execute_command("CLIENT", "UNPAUSE")
            await store.aclose()
            await admin.aclose()


@pytest.mark.redis
async def test_closing_while_connecting_keeps_no_connection_and_fails_the_waiter() -> None:
    with private_redis_server() as server:

        async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", server.port)
            try:
                await asyncio.gather(
                    pump(reader, up_w), pump(up_r, writer, 0.3), return_exceptions=True
                )
            finally:
                writer.close()

        proxy = await asyncio.start_server(slow, "127.0.0.1", 0)
        port = proxy.sockets[0].getsockname()[1]
        pool = BlockingConnectionPool.from_url(f"redis://127.0.0.1:{port}", max_connections=2)
        pipe = ScriptPipe(pool, 4, bound=2.0)
        try:
            waiter = asyncio.create_task(pipe.connect())
            await asyncio.sleep(0.05)  # the handshake is on its way
            await pipe.aclose()
            with pytest.raises(ConnectionError):
                await waiter  # told the pipe closed, not cancelled
            await asyncio.sleep(0.5)
            assert not pipe.connected and len(pool._in_use_connections) == 0
        finally:
            await pool.aclose()
            proxy.close()


@pytest.mark.redis
async def test_closing_is_cancelled_with_its_caller(redis_url: str) -> None:
    pool = BlockingConnectionPool.from_url(redis_url, max_connections=2)
    pipe = ScriptPipe(pool, 4, bound=2.0)
    try:
        await pipe.connect()
        closer = asyncio.create_task(pipe.aclose())
        await asyncio.sleep(0)  # closing, waiting for the reader to end
        closer.cancel()  # a shutdown's own timeout, say
        with pytest.raises(asyncio.CancelledError):
            await closer
    finally:
        await pipe.aclose()
        await pool.aclose()


@pytest.mark.redis
async def test_a_path_gone_silent_between_pipelined_replies_is_dropped_and_replaced() -> None:
    # The path to Redis drops everything after one reply (a partition mid-stream): a
    # command sent before that reply was read never gets its own. The connection must
    # not stay up because replies came not long before: it is dropped a bound after the
    # last read, and the calls after it run on a new one.
    with private_redis_server() as server:
        connections = 0
        silent = asyncio.Event()

        async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal connections
            connections += 1
            first = connections == 1
            up_r, up_w = await asyncio.open_connection("127.0.0.1", server.port)

            async def down() -> None:
                try:
                    while data := await up_r.read(65536):
                        if first and silent.is_set():
                            continue  # the path gone silent, this connection only
                        writer.write(data)
                        if first and b"fast" in data:
                            silent.set()
                finally:
                    writer.close()

            await asyncio.gather(pump(reader, up_w), down(), return_exceptions=True)

        proxy = await asyncio.start_server(relay, "127.0.0.1", 0)
        port = proxy.sockets[0].getsockname()[1]
        store = RedisCounterStore(
            f"redis://127.0.0.1:{port}", timeout=0.3, breaker=Breaker(failures=100)
        )
        busy = Script(BUSY)
        try:
            await store._call(busy, [], ["warm", 0])
            fast = asyncio.create_task(store._call(busy, [], ["fast", 100_000]))
            await asyncio.sleep(0.01)  # sent before the reply of "fast" is read
            slow = asyncio.create_task(store._call(busy, [], ["slow", 100_000]))
            assert await fast == b"fast"
            with pytest.raises(StateUnavailable):
                await slow
            await asyncio.sleep(0.4)  # a bound after the last read: dropped
            assert [await store._call(busy, [], [f"later{n}", 0]) for n in range(3)] == [
                b"later0",
                b"later1",
                b"later2",
            ]
            assert connections == 2
        finally:
            await store.aclose()
            proxy.close()


@pytest.mark.redis
async def test_a_reload_after_a_deadline_taken_back_fails_at_once() -> None:
    # NOSCRIPT comes back as the deadline falls due: read in the turns the deadline
    # grants, no time is left under it for SCRIPT LOAD and the call again, so the call
    # fails at once; read earlier, the reload runs under what is left of the bound.
    # Either way the call ends within its bound, not unbounded after it
    with private_redis_server() as server:
        admin = Redis.from_url(server.url)
        pipe_pool = BlockingConnectionPool.from_url(server.url, max_connections=2)
        pipe = ScriptPipe(pipe_pool, 4, bound=5.0)
        try:
            await pipe.connect()
            await admin.script_flush()
            pipe.take()
            deadline = Deadline(0.05)
            flush = pipe._flush

            def stalled_flush() -> None:
                flush()
                pipe._flush = flush  # type: ignore[method-assign]  # once
                time.sleep(0.1)  # the deadline falls due with the reply

            pipe._flush = stalled_flush  # type: ignore[method-assign]
            started = time.monotonic()
            try:
                await pipe.run(Script("return 'x'"), [], [], deadline)
            except NoScriptError:
                assert deadline.spent  # read in the deadline's grace: no reload started
            except asyncio.CancelledError:
                assert deadline.expired()  # the reload began in time, the bound ended it
            else:
                raise AssertionError("the call after NOSCRIPT returned")
            finally:
                deadline.close()
            assert time.monotonic() - started < 0.5
            await asyncio.sleep(0.1)
            assert not pipe._calls and pipe._places == 4
        finally:
            await pipe.aclose()
            await pipe_pool.aclose()
            await admin.aclose()


@pytest.mark.redis
async def test_turns_that_each_run_longer_than_the_bound_do_not_drop_a_healthy_connection() -> None:
    # An overloaded gateway: for 3 s every loop turn is 0.25 s of its own work, the
    # bound 0.2 s; Redis answers at once. Replies wait in the socket for the loop, not
    # for Redis: the watch must not take that for silence.
    with private_redis_server() as server:
        pool = BlockingConnectionPool.from_url(server.url, max_connections=2)
        pipe = ScriptPipe(pool, 16, bound=0.2)
        echo = Script("return ARGV[1]")
        loop = asyncio.get_running_loop()
        try:
            await pipe.connect()
            reader = pipe._reader
            stop = time.monotonic() + 3.0

            def hog() -> None:
                if time.monotonic() < stop:
                    time.sleep(0.25)
                    loop.call_soon(hog)

            async def worker(n: int) -> list[bytes]:
                for _ in range(n % 4):  # the workers' calls go out in different turns
                    await asyncio.sleep(0)
                got = []
                while time.monotonic() < stop:
                    got.append(await run(pipe, echo, [f"w{n}"]))
                return got

            loop.call_soon(hog)
            results = await asyncio.gather(*(worker(n) for n in range(12)))
            for n, got in enumerate(results):  # each its own replies, none failed
                assert set(got) <= {f"w{n}".encode()}
            assert sum(map(len, results)) >= 12
            assert pipe._reader is reader  # never dropped
        finally:
            await pipe.aclose()
            await pool.aclose()


@pytest.mark.redis
async def test_a_command_still_unsent_when_the_pipe_closes_is_never_sent() -> None:
    # closed in the turn a call was made: the caller is told the connection closed, so
    # the command must not reach Redis after that (a charge nobody would give back)
    with private_redis_server() as server:
        admin = Redis.from_url(server.url)
        pool = BlockingConnectionPool.from_url(server.url, max_connections=2)
        pipe = ScriptPipe(pool, 4, bound=0.3)
        incr = Script("return redis.call('INCR', KEYS[1])")
        try:
            await pipe.connect()
            await admin.script_load(incr.text)
            pipe.take()
            deadline = Deadline(5.0)
            call = asyncio.create_task(pipe.run(incr, ["k"], [], deadline, hold=True))
            await asyncio.sleep(0)  # queued: its write is due next turn
            await pipe.aclose()
            with pytest.raises(ConnectionError):
                await call
            deadline.close()
            await asyncio.sleep(0.1)
            assert await admin.get("k") is None
            assert pipe._watch is None and pipe._places == 4
        finally:
            await pool.aclose()
            await admin.aclose()
