"""RESP replies read straight off a redis-py connection's stream, for ``state.scripts``.

Why not redis-py's reader: without hiredis, redis-py's Python parser reads a reply a
line at a time, each line through its own ``_readline``, the stream's ``readline``
and ``readuntil`` and a coroutine per element (~13 Python calls a line); the way-in
script's reply is ~18 lines, so measured on the full path
(``benchmarks/cpu_profile.py --state redis --profile``) this reader took the
gateway's Python calls from 1,356 to 1,138 a request, and reads the way-in reply in
~12 µs where redis-py's took ~44. Here one ``read`` takes what the socket has (a
whole reply, almost always) and ``parse`` walks it in one loop with a stack of the
aggregates still open: a ``find`` and an ``append`` an element. A reply split across
reads is parsed again from its start once more bytes arrive (these replies are a few
hundred bytes).

Every reply type of RESP2 and RESP3 comes back as redis-py (``decode_responses``
off) gives it: integers and big numbers as ``int``, bulk, simple and verbatim
strings as ``bytes`` (a verbatim one without its format), nil as ``None``, doubles
as ``float``, booleans as ``bool``, arrays and sets as lists, maps as dicts, errors
as redis-py's exception for their code (``NoScriptError``, ``BusyLoadingError``,
``OutOfMemoryError`` …, by redis-py's own table): raised when the reply is one,
left in place inside an array. A push message ahead of the reply is skipped.

A caller that must know what its script did even when it is cancelled (the store's
way in and way out: a charge made for a caller gone is given back) reads with
``hold``, the call's ``Deadline``: a cancellation that is not the deadline's is then
held until the reply is read, and raised after it as ``ReplyThenCancelled``, which
carries the reply, the connection left clean for the next call. A call not cancelled
pays nothing for this, where running each call as a shielded task of its own
(``ensure_future`` and ``shield``, what the store did before) cost ~16 µs of CPU a
call and a loop turn. The deadline's own cancellation is never held: a caller
waits for a held reply no longer than the call's bound.

What stays redis-py's: the connection and its stream. A read that fails, is
cancelled or finds more than one reply disconnects the connection, as redis-py's
``read_response`` does, so no reply or part of one is left for the next call; a
Sentinel-managed connection that meets ``READONLY`` (its primary was demoted) is
dropped with a ``ConnectionError``, as redis-py's own read does.
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis._parsers import BaseParser
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.sentinel import SentinelManagedConnection
from redis.exceptions import ConnectionError, InvalidResponse, ReadOnlyError, ResponseError

from fairgate.state.deadline import Deadline

__all__ = ["ReplyThenCancelled", "parse", "read_reply"]

_CHUNK = 65536  # what one read may take; a reply longer than this takes more reads
_CLOSED = "Connection closed by server."  # redis-py's words for it

_NUMBER = frozenset(b":(")  # integer, big number
_BLOB = frozenset(b"$=!")  # bulk string, verbatim string, blob error
_AGGREGATE = frozenset(b"*~%>")  # array, set, map, push


class ReplyThenCancelled(asyncio.CancelledError):
    """The caller was cancelled while its reply was on its way: raised once the reply
    was read, with it (``reply``: the value, or the error reply as an exception, not
    raised). Re-raise a plain ``CancelledError`` from it: ``asyncio.timeout`` knows
    only that type as its own."""

    def __init__(self, reply: Any) -> None:
        super().__init__()
        self.reply = reply


async def read_reply(conn: AbstractConnection, hold: Deadline | None = None) -> Any:
    """The next reply on ``conn`` (its error raised when it is one); ``conn`` is
    disconnected when the read fails, is cancelled or finds more than one reply.
    ``hold``: a cancellation that is not this deadline's is held until the reply is
    read, then raised as ``ReplyThenCancelled`` (``conn`` stays connected)."""
    reader = conn._reader
    if reader is None:
        raise ConnectionError(_CLOSED)
    held = False
    data = b""
    try:
        while True:
            try:
                more = await reader.read(_CHUNK)
            except asyncio.CancelledError:
                if hold is None or hold.fired:
                    raise
                held = True  # a cancelled read takes nothing off the stream: read on
                continue
            if not more:
                raise ConnectionError(_CLOSED)
            data = data + more if data else more
            parsed = parse(data)
            if parsed is not None:
                break
        reply, end = parsed
        if end != len(data):  # one command, one reply: anything more is out of step
            raise InvalidResponse(f"Protocol Error: {len(data) - end} bytes past the reply")
    except BaseException as exc:
        await conn.disconnect(nowait=True)
        if held and not isinstance(exc, asyncio.CancelledError):
            raise asyncio.CancelledError from exc  # the cancellation held is not lost
        if isinstance(exc, OSError):
            raise ConnectionError(f"Error while reading from Redis: {exc.args}") from exc
        raise
    error: Exception | None = None
    if isinstance(reply, ResponseError):
        error = reply
        if isinstance(reply, ReadOnlyError) and isinstance(conn, SentinelManagedConnection):
            # as redis-py's Sentinel-managed connection does: the primary it holds was
            # demoted, so drop it and ask the Sentinels for the new one at the next connect
            await conn.disconnect()
            error = ConnectionError("The previous master is now a slave")
            error.__cause__ = reply
    if held:
        raise ReplyThenCancelled(reply if error is None else error)
    if error is not None:
        raise error
    return reply


def parse(data: bytes) -> tuple[Any, int] | None:
    """The first reply in ``data`` and where it ends, or ``None`` when ``data`` holds
    only its beginning (raises ``InvalidResponse`` on what is not RESP, and an error
    reply of redis-py's ``ConnectionError`` kind, e.g. "max number of clients")."""
    size = len(data)
    pos = 0
    # the aggregates still open, innermost last: [type byte, items still to come, items]
    open_: list[list[Any]] = []
    while True:
        start, eol = pos, data.find(b"\r\n", pos)
        if eol < 0:
            return None
        kind, head, pos = data[start], data[start + 1 : eol], eol + 2
        value: Any
        if kind in _NUMBER:
            value = int(head)
        elif kind in _BLOB:
            length = int(head)
            if length < 0:  # RESP2's nil bulk string
                value = None
            else:
                stop = pos + length
                if stop + 2 > size:
                    return None
                value, pos = data[pos:stop], stop + 2
                if kind == 0x3D:  # "=": verbatim, after its "txt:" format
                    value = value[4:]
                elif kind == 0x21:  # "!": a blob error
                    value = _error(value)
        elif kind in _AGGREGATE:
            count = int(head) * (2 if kind == 0x25 else 1)  # "%": a key and a value each
            if count > 0:
                open_.append([kind, count, []])
                continue
            value = None if count < 0 else {} if kind == 0x25 else []  # "*-1": RESP2's nil
        elif kind == 0x2B:  # "+"
            value = head
        elif kind == 0x2D:  # "-"
            value = _error(head)
        elif kind == 0x5F:  # "_"
            value = None
        elif kind == 0x2C:  # ","
            value = float(head)
        elif kind == 0x23:  # "#"
            value = head == b"t"
        else:
            raise InvalidResponse(f"Protocol Error: {data[start:eol]!r}")
        while open_:  # the value ends every aggregate whose last item it is
            inner = open_[-1]
            inner[2].append(value)
            inner[1] -= 1
            if inner[1]:
                break
            open_.pop()
            kind, items = inner[0], inner[2]
            value = dict(zip(items[::2], items[1::2], strict=True)) if kind == 0x25 else items
        else:
            if kind == 0x3E:  # ">": a push message, not the reply
                continue
            return value, pos


def _error(text: bytes) -> ResponseError:
    """An error reply as redis-py's exception for its code (raised at once when it is
    one of redis-py's connection errors, as redis-py does)."""
    error = BaseParser.parse_error(text.decode("utf-8", errors="replace"))  # type: ignore[no-untyped-call]  # redis-py's
    if isinstance(error, ConnectionError):
        raise error
    assert isinstance(error, ResponseError)
    return error
