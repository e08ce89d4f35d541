"""Lua scripts run by EVALSHA, pipelined on one connection the store keeps to itself.

Why not redis-py's ``Script`` and its pooled ``execute_command``: measured on the
full path (``benchmarks/cpu_profile.py --state redis``), one script call cost
~300 µs of the gateway's CPU, of which packing its ~95 arguments through redis-py's
encoder ~90 µs, the blocking pool's checkout and release (a condition, a timeout,
a readiness probe, observability records) ~10 µs or more, and the command's own
machinery (retry wrapper, a timer for the write and one for the read on top of the
caller's) the rest beside the socket work. Here the command is packed from a memo of
its words' bulk strings (``Script.pack``).

Why one connection and a pipeline, not a connection a call: under load a loop turn
makes many script calls at once (~18 a turn at 32 requests in flight, measured with
``benchmarks/cpu_profile.py --state redis``), and a connection a call paid a write,
a read and a wake-up of its own for each, in the gateway and in Redis. ``ScriptPipe``
queues the commands of one loop turn and writes them in one write; one reader task
reads the replies as they come, in order (Redis answers a connection's commands in
the order they came), and hands each to its caller. Measured on the full path, two
before-and-after pairs (``overhead.py throughput --state redis``): the gateway's CPU a
request 658 / 691 → 557 / 614 µs, req/s 1,523 / 1,463 → 1,838 / 1,669; Redis's own CPU
~240 → ~170 µs a request (``cpu_profile.py``). Redis runs one script at a time whatever
the number of connections, so one connection costs no parallelism.

The commands in flight at once are bounded (``window``): past it a call waits its turn
(``room``, ``take``, ``wait``) in this gateway, in the order the calls came, and that
wait is this gateway's own congestion, not Redis's; the caller bounds it apart from the
Redis work (``RedisCounterStore._call``). A reply read in the loop turn the call's
``Deadline`` cancels it is in time, as it was when each caller read its own socket.

The replies are parsed by ``state.replies`` (one loop over what one read brought).
What stays redis-py's: connecting (TLS, AUTH, SELECT, the Sentinel-managed connection
that asks for the primary). A connection that fails (a read or write error, EOF, a
reply out of step, ``READONLY`` from a demoted primary) fails every call in flight on
it with ``ConnectionError`` and is connected again at the next call, through
``connect`` as the pool would (a Sentinel-managed one asks for the primary again).
While commands are in flight a watch drops the connection once nothing at all has
been read for a whole bound since the oldest of them was written: Redis, or the path
to it, is gone silent, and the next call must not queue behind it (nor the window
stay full of commands no reply will ever free). A call cancelled leaves its reply to
the reader, which drops it: the connection stays in step, and the command keeps its
place in the window until its reply is read (so the window bounds what Redis has
queued, abandoned commands included, but for the reloads after a restart).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections import deque
from collections.abc import Sequence
from typing import Any

from redis.asyncio import ConnectionPool
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.sentinel import SentinelManagedConnection
from redis.exceptions import (
    ConnectionError,
    InvalidResponse,
    NoScriptError,
    ReadOnlyError,
    ResponseError,
)

from fairgate.core.memo import BoundedMemo
from fairgate.state.deadline import Deadline
from fairgate.state.replies import ReplyThenCancelled, parse

__all__ = ["Script", "ScriptPipe"]

_CHUNK = 65536  # what one read may take; more replies than this take more reads
_CLOSED = "Connection closed by server."  # redis-py's words for it

Arg = str | int | float


class Script:
    """One Lua script: its text and SHA1 (EVALSHA's name for it)."""

    __slots__ = ("_head", "sha", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.sha = hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()
        self._head = b"$%d\r\n%s\r\n" % (len(self.sha), self.sha.encode())

    def pack(self, keys: Sequence[str], args: Sequence[Arg]) -> bytes:
        """``EVALSHA sha len(keys) *keys *args`` in RESP, as redis-py would encode it
        (``str`` as UTF-8, numbers by ``str``: for ``int`` and ``float`` the same as
        ``repr``).

        Each word's bulk string (``$<bytes>\\r\\n<word>\\r\\n``) is read from a memo
        (``_BULKS``), not worked out: most words of a request's scripts are the same
        from one request to the next (key names, limits, window shapes, field kinds),
        and measured (~90 words a call) a memo read a word packs a call in ~2/5 of the
        time of working every length out (``map`` and one ``join``, itself ~3/4 of the
        time of a Python loop a word)."""
        bulk = _BULKS.value
        text = "".join([bulk(str(len(keys))), *map(bulk, keys), *map(bulk, map(str, args))])
        size = len(keys) + len(args) + 3
        return b"*%d\r\n$7\r\nEVALSHA\r\n%s%s" % (size, self._head, text.encode())


def _bulk(word: str) -> str:
    """``word`` as a RESP bulk string; its length counts UTF-8 bytes, not characters."""
    size = len(word) if word.isascii() else len(word.encode())
    return f"${size}\r\n{word}\r\n"


# Words a script call sends, as bulk strings. A word that changes with every request (a
# lease id, the time) is kept too and forgotten with the rest when the memo is full:
# the words that repeat are worked out again once each, every few hundred requests.
_BULKS = BoundedMemo[str, str](4096, work=_bulk)


class _Call:
    """One command in flight: the future its caller waits on, its reply when the reader
    got it after that future was cancelled (``answered``), and whether it holds one of
    the pipe's places (``placed``: given back when its reply is read, or it fails)."""

    __slots__ = ("answered", "future", "placed", "reply", "written")

    def __init__(self, future: asyncio.Future[Any], placed: bool) -> None:
        self.future = future
        self.placed = placed
        self.written: float | None = None  # the loop's time when it was written
        self.reply: Any = None
        self.answered = False


class ScriptPipe:
    """Runs ``Script``s pipelined on one connection taken out of ``pool`` and kept, at
    most ``window`` commands in flight at once (see the module text); ``bound`` (s)
    bounds connecting.

    The caller takes a place (``room`` and ``take``, or ``wait``), connects when
    ``connected`` is false (``connect``), and runs its script (``run``), which takes
    the place over: it is free again once the command's reply is read or the command
    failed, whether the caller waited for it or not. A caller that never got to
    ``run`` gives its place back itself (``give_back``)."""

    def __init__(self, pool: ConnectionPool, window: int, bound: float) -> None:
        self._pool = pool
        self._places = max(1, window)
        self._bound = bound
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._conn: AbstractConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._out: list[bytes] = []  # commands of this loop turn, not written yet
        self._out_calls: list[_Call] = []  # and their calls
        self._calls: deque[_Call] = deque()  # sent or to be sent, in order
        self._read_at = 0.0  # the loop's time of the last read that brought bytes
        self._watch: asyncio.Handle | None = None  # the silence watch, while armed
        self._window = self._places
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing: asyncio.Future[None] | None = None  # a dropped connection's close
        self._closed = False

    # -- places ---------------------------------------------------------------------

    def room(self) -> bool:
        """Whether a call may take a place at once (``take``)."""
        return self._places > 0 and not self._waiters

    def take(self) -> None:
        self._places -= 1

    async def wait(self) -> None:
        """A place handed over as a command's reply was read (in the order asked)."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.give_back()  # handed over as this call was cancelled
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            raise

    def give_back(self) -> None:
        """A place taken is free again: to the longest waiter."""
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._places += 1

    def ready(self) -> bool:
        """Whether a call can start at once: a place is free and the connection is up."""
        return self._places > 0 and not self._waiters and self.connected

    # -- the connection -------------------------------------------------------------

    @property
    def connected(self) -> bool:
        reader = self._reader
        return reader is not None and not reader.done()

    async def connect(self) -> None:
        """Connect (once for every call that asks meanwhile, within ``bound``) and start
        the reader."""
        if self.connected:
            return
        if self._closed:
            raise ConnectionError(_CLOSED)
        if self._connecting is None or self._connecting.done():
            self._connecting = asyncio.ensure_future(self._open())
        try:
            await asyncio.shield(self._connecting)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self._closed and task is not None and not task.cancelling():
                raise ConnectionError(_CLOSED) from None  # closed, not this caller
            raise

    async def _open(self) -> None:
        if self._closing is not None:  # the dropped connection is closed before reuse
            closing, self._closing = self._closing, None
            await asyncio.wait([closing])
        conn = self._conn
        try:
            # bounded here, not by a caller's deadline: the callers wait shielded, and
            # a handshake a silent peer never answers must not hold every later connect
            async with asyncio.timeout(self._bound):
                if conn is None:
                    conn = await self._pool.get_connection()  # type: ignore[no-untyped-call]
                    self._conn = conn
                if not conn.is_connected:
                    # connect() as the pool does: a Sentinel-managed connection asks the
                    # Sentinels for the primary there
                    await conn.connect()
        except BaseException:
            if conn is not None:
                await conn.disconnect(nowait=True)
            raise
        if self._closed:  # closed while connecting
            await conn.disconnect()
            raise ConnectionError(_CLOSED)
        self._loop = asyncio.get_running_loop()
        self._reader = self._loop.create_task(self._read(conn))

    def _drop(self, error: Exception) -> None:
        """Fail every call in flight with ``error`` (each its own copy) and disconnect
        (the next call connects again)."""
        self._out.clear()
        self._out_calls.clear()
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        calls = self._calls
        while calls:
            failed = type(error)(*error.args)
            failed.__cause__ = error.__cause__
            self._answer(calls.popleft(), failed)
        reader, self._reader = self._reader, None
        if reader is not None and reader is not asyncio.current_task():
            reader.cancel()
        conn = self._conn
        if conn is not None:
            # nowait: a broken socket is not waited for (redis-py's disconnect is a
            # coroutine: the next connect waits for it first)
            self._closing = asyncio.ensure_future(conn.disconnect(nowait=True))

    async def _read(self, conn: AbstractConnection) -> None:
        reader = conn._reader
        calls = self._calls
        answer = self._answer
        data = b""
        try:
            if reader is None:
                raise ConnectionError(_CLOSED)
            while True:
                more = await reader.read(_CHUNK)
                if not more:
                    raise ConnectionError(_CLOSED)
                self._read_at = self._loop.time()  # type: ignore[union-attr]  # connected
                data = data + more if data else more
                pos = 0
                while True:
                    parsed = parse(data, pos)
                    if parsed is None:
                        break
                    if not calls:
                        raise InvalidResponse("Protocol Error: a reply no command asked for")
                    reply, pos = parsed
                    if isinstance(reply, ReadOnlyError) and isinstance(
                        conn, SentinelManagedConnection
                    ):
                        # as redis-py's Sentinel-managed connection does: the primary it
                        # holds was demoted; the next connect asks the Sentinels again
                        error = ConnectionError("The previous master is now a slave")
                        error.__cause__ = reply
                        raise error
                    answer(calls.popleft(), reply)
                data = data[pos:] if pos else data
        except asyncio.CancelledError:
            if self._reader is not None and self._reader is asyncio.current_task():
                self._drop(ConnectionError("the connection to Redis was closed"))
            raise
        except Exception as exc:
            if isinstance(exc, OSError):
                exc = ConnectionError(f"Error while reading from Redis: {exc.args}")
            self._drop(exc)

    def _answer(self, call: _Call, reply: Any) -> None:
        if call.placed:
            self.give_back()
        future = call.future
        if future.done():  # its caller was cancelled: kept for a caller holding on
            call.reply, call.answered = reply, True
        else:
            future.set_result(reply)

    def _send(self, payload: bytes, placed: bool) -> _Call:
        out = self._out
        if not out:
            self._loop.call_soon(self._flush)  # type: ignore[union-attr]  # connected
        out.append(payload)
        call = _Call(self._loop.create_future(), placed)  # type: ignore[union-attr]
        self._calls.append(call)
        self._out_calls.append(call)
        return call

    def _flush(self) -> None:
        out = self._out
        if not out or self._closed:
            return  # dropped or closed meanwhile
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        writer = None if self._conn is None else self._conn._writer
        if writer is None or writer.transport.is_closing():
            self._drop(ConnectionError("Connection closed by the server before write"))
            return
        writer.write(data)
        now = self._loop.time()  # type: ignore[union-attr]  # connected
        for call in self._out_calls:
            call.written = now
        self._out_calls.clear()
        if self._watch is None:
            self._watch = self._loop.call_later(self._bound, self._look)  # type: ignore[union-attr]

    def _look(self) -> None:
        """The silence watch, armed by a write while nothing watches: drop the connection
        when commands are in flight and nothing at all has been read for a whole bound
        since the oldest of them was written (Redis, or the path to it, gone silent).
        Confirmed two loop turns later, with the time those turns took added to the
        bound, so that the loop first reads what already came: turns that run long (the
        gateway's own doing) delay the reader as much as the watch, and say nothing
        about Redis."""
        self._watch = None
        quiet = self._quiet()
        if quiet is None:
            return  # nothing in flight: the next write arms the watch again
        loop = self._loop
        assert loop is not None
        if quiet < self._bound:
            self._watch = loop.call_later(self._bound - quiet, self._look)
            return
        reader, looked = self._reader, loop.time()

        def confirm() -> None:
            if self._reader is not reader:
                return  # dropped meanwhile (a new connection has a watch of its own)
            self._watch = None
            quiet = self._quiet()
            if quiet is None:
                return
            # the loop's own lag since the look (turns that ran long) delays the reads as
            # much as it lengthens the silence: it is not counted against Redis
            allowed = self._bound + (loop.time() - looked)
            if quiet >= allowed:
                self._drop(ConnectionError("no reply from Redis within the bound"))
            else:
                self._watch = loop.call_later(allowed - quiet, self._look)

        self._watch = loop.call_soon(loop.call_soon, confirm)

    def _quiet(self) -> float | None:
        """How long the connection has been silent while a written command waits (None:
        none waits)."""
        calls = self._calls
        if not calls or calls[0].written is None or not self.connected:
            return None
        since = max(calls[0].written, self._read_at)
        return self._loop.time() - since  # type: ignore[union-attr]  # connected

    # -- calls ----------------------------------------------------------------------

    async def run(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[Arg],
        deadline: Deadline,
        hold: bool = False,
    ) -> Any:
        """The script's reply (raises redis-py's errors; NOSCRIPT loads it, once); takes
        over the caller's place. ``deadline``: the call's bound (a reply read by the
        turn it cancels is in time); ``hold``: a cancellation once the script is sent
        (not the deadline's) is raised after its reply, as ``ReplyThenCancelled``."""
        try:
            if not self.connected:
                raise ConnectionError(_CLOSED)
            payload = script.pack(keys, args)
        except BaseException:
            self.give_back()  # never sent
            raise
        reply, held = await self._reply(self._send(payload, True), deadline, hold, False)
        if isinstance(reply, NoScriptError):  # a restarted or flushed Redis
            if held:
                raise asyncio.CancelledError  # the script has not run
            if deadline.spent:
                raise reply  # in time, but no time is left for the reload
            if not self.connected:
                raise ConnectionError(_CLOSED)
            # in the same write, no round trip more; these two take no place (after a
            # restart every call then in flight reloads: the window is passed, once)
            load = self._send(_load(script.text), False)
            again = self._send(payload, False)
            _, held = await self._reply(load, deadline, hold, held)
            reply, held = await self._reply(again, deadline, hold, held)
        if held:
            if isinstance(reply, ResponseError) or not isinstance(reply, Exception):
                raise ReplyThenCancelled(reply)
            raise asyncio.CancelledError from reply  # no reply: the cancellation stays
        if isinstance(reply, Exception):
            raise reply
        return reply

    async def _reply(
        self, call: _Call, deadline: Deadline, hold: bool, held: bool
    ) -> tuple[Any, bool]:
        """``call``'s reply (an error reply or a connection failure as an exception
        instance, not raised) and whether a cancellation is held."""
        while True:
            if call.answered:
                return call.reply, held
            try:
                return await call.future, held
            except asyncio.CancelledError:
                future = call.future
                there = call.answered or (future.done() and not future.cancelled())
                if deadline.fired:
                    if not there:
                        raise
                    if deadline.expired():
                        continue  # read by the turn the deadline cancelled: in time
                    # and another cancellation as well: held, or raised
                if not hold:
                    raise  # its reply is the reader's to drop
                held = True
                if future.cancelled():
                    call.future = asyncio.get_running_loop().create_future()

    async def disconnect_idle(self) -> None:
        """Disconnect the connection when it is up and no call holds or waits for a
        place, nor connects (it reconnects when next used)."""
        connecting = self._connecting is not None and not self._connecting.done()
        idle = self._places == self._window and not self._waiters and not self._calls
        if self.connected and idle and not connecting:
            self._drop(ConnectionError(_CLOSED))
            if self._closing is not None:
                await asyncio.wait([self._closing])

    async def aclose(self) -> None:
        """Fail the calls still in flight, disconnect and give the connection back to the
        pool (before it closes)."""
        self._closed = True
        self._out.clear()  # not sent: their calls fail below as never sent
        self._out_calls.clear()
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        connecting, self._connecting = self._connecting, None
        if connecting is not None and not connecting.done():
            connecting.cancel()
            await asyncio.wait([connecting])
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            await asyncio.wait([reader])
        calls = self._calls
        while calls:
            self._answer(calls.popleft(), ConnectionError(_CLOSED))
        if self._closing is not None:
            await asyncio.wait([self._closing])
        conn, self._conn = self._conn, None
        if conn is not None:
            # replies still on their way would meet the pool's next user of it
            await conn.disconnect()
            await self._pool.release(conn)


def _load(text: str) -> bytes:
    body = text.encode()
    return b"*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n$%d\r\n%s\r\n" % (len(body), body)
