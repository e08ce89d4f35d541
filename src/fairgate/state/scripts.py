"""Lua scripts run by EVALSHA on connections the store keeps to itself.

Why not redis-py's ``Script`` and its pooled ``execute_command``: measured on the
full path (``benchmarks/cpu_profile.py --state redis``), one script call cost
~300 µs of the gateway's CPU, of which packing its ~95 arguments through redis-py's
encoder ~90 µs, the blocking pool's checkout and release (a condition, a timeout,
a readiness probe, observability records) ~10 µs or more, and the command's own
machinery (retry wrapper, a timer for the write and one for the read on top of the
caller's) the rest beside the socket work. Here the command is packed from a memo of
its words' bulk strings (``Script.pack``), and a call takes a connection from a free
list of connections this runner took out of the pool once and keeps (``pinned``),
so the pool is not touched again.

The reply is read by ``state.replies`` (one read and one loop a reply, where
redis-py's Python parser spent a dozen calls a line). What stays redis-py's:
connecting (TLS, AUTH, SELECT, the Sentinel-managed connection that asks for the
primary), and the write. A connection whose write or read failed or was cancelled
is disconnected (by redis-py, or by ``state.replies`` as redis-py would) and is connected
again at its next use, through ``connect`` as the pool would (a Sentinel-managed one
asks for the primary again). The caller bounds every call (``RedisCounterStore._call``):
the wait for a kept connection apart from the Redis work, so that a burst of calls
queued in this gateway is never taken for Redis failing.
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
from redis.exceptions import NoScriptError

from fairgate.core.memo import BoundedMemo
from fairgate.state.deadline import Deadline
from fairgate.state.replies import read_reply

__all__ = ["Script", "ScriptRunner"]

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


class ScriptRunner:
    """Runs ``Script``s on at most ``pinned`` connections taken out of ``pool`` and kept.

    The caller takes a connection (``free``, ``room``/``open``, ``wait``), runs on it
    (``run_on``) and hands it back (``give_back``), so that it can bound each part apart:
    opening a connection and running a script are Redis's doing, waiting for one of
    the kept connections is this gateway's own congestion. Past ``pinned`` calls at
    once a call waits for a kept connection to be handed back, in the order the calls
    came; a burst queues here and never on the pool, whose other connections stay for
    its other users (the board, the response owners, the usage reads)."""

    def __init__(self, pool: ConnectionPool, pinned: int) -> None:
        self._pool = pool
        self._cap = max(1, pinned)
        self._mine: set[AbstractConnection] = set()
        self._opening = 0  # connections being taken out of the pool right now
        self.free: list[AbstractConnection] = []
        """Kept connections not in use (pop one to use it)."""
        self._waiters: deque[asyncio.Future[AbstractConnection]] = deque()

    def ready(self) -> bool:
        """Whether a call can start at once: a kept connection is free and connected."""
        free = self.free
        return bool(free) and free[-1].is_connected

    def room(self) -> bool:
        """Whether one more connection may be taken out of the pool (``open``)."""
        return len(self._mine) + self._opening < self._cap

    async def open(self) -> AbstractConnection:
        """A connection taken out of the pool (connected) and kept from now on."""
        self._opening += 1
        try:
            conn: AbstractConnection = await self._pool.get_connection()  # type: ignore[no-untyped-call]
        finally:
            self._opening -= 1
        self._mine.add(conn)
        return conn

    async def wait(self) -> AbstractConnection:
        """The next kept connection handed back (calls wait in the order they came)."""
        waiter: asyncio.Future[AbstractConnection] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            return await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.give_back(waiter.result())  # handed over as this call was cancelled
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            raise

    def give_back(self, conn: AbstractConnection) -> None:
        """A connection taken from this runner is free again: to the longest waiter."""
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return
        self.free.append(conn)

    async def run_on(
        self,
        conn: AbstractConnection,
        script: Script,
        keys: Sequence[str],
        args: Sequence[Arg],
        hold: Deadline | None = None,
    ) -> Any:
        """The script's reply on ``conn`` (raises redis-py's errors; NOSCRIPT loads it,
        once). ``hold``: a cancellation once the script is sent (not ``hold``'s own) is
        raised after its reply, as ``ReplyThenCancelled`` (``state.replies``)."""
        payload = script.pack(keys, args)
        if not conn.is_connected:
            # connect() as the pool does: a Sentinel-managed connection asks the
            # Sentinels for the primary there (a send would reconnect to the old one)
            await conn.connect()  # type: ignore[no-untyped-call]  # redis-py's
        await conn.send_packed_command(payload, check_health=False)
        try:
            return await read_reply(conn, hold)
        except NoScriptError:  # a restarted or flushed Redis: load it and run it again
            await conn.send_packed_command(_load(script.text), check_health=False)
            await read_reply(conn)  # cancelled here, the script has not run
            await conn.send_packed_command(payload, check_health=False)
            return await read_reply(conn, hold)

    async def disconnect_idle(self) -> None:
        """Disconnect the kept connections not in use (they reconnect when next used)."""
        for conn in list(self.free):
            await conn.disconnect()

    async def aclose(self) -> None:
        """Give every kept connection not in use back to the pool (before it closes)."""
        free, self.free = self.free, []
        for conn in free:
            self._mine.discard(conn)
            await self._pool.release(conn)


def _load(text: str) -> bytes:
    body = text.encode()
    return b"*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n$%d\r\n%s\r\n" % (len(body), body)
