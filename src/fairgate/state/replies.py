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

What stays redis-py's: the connection and its stream. A read that fails, is
cancelled or finds more than one reply disconnects the connection, as redis-py's
``read_response`` does, so no reply or part of one is left for the next call; a
Sentinel-managed connection that meets ``READONLY`` (its primary was demoted) is
dropped with a ``ConnectionError``, as redis-py's own read does.
"""

from __future__ import annotations

from typing import Any

from redis._parsers import BaseParser
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.sentinel import SentinelManagedConnection
from redis.exceptions import ConnectionError, InvalidResponse, ReadOnlyError, ResponseError

__all__ = ["parse", "read_reply"]

_CHUNK = 65536  # what one read may take; a reply longer than this takes more reads
_CLOSED = "Connection closed by server."  # redis-py's words for it

_NUMBER = frozenset(b":(")  # integer, big number
_BLOB = frozenset(b"$=!")  # bulk string, verbatim string, blob error
_AGGREGATE = frozenset(b"*~%>")  # array, set, map, push


async def read_reply(conn: AbstractConnection) -> Any:
    """The next reply on ``conn`` (its error raised when it is one); ``conn`` is
    disconnected when the read fails, is cancelled or finds more than one reply."""
    reader = conn._reader
    if reader is None:
        raise ConnectionError(_CLOSED)
    try:
        data = await reader.read(_CHUNK)
        while True:
            if not data:
                raise ConnectionError(_CLOSED)
            parsed = parse(data)
            if parsed is not None:
                break
            more = await reader.read(_CHUNK)
            data = data + more if more else b""
        reply, end = parsed
        if end != len(data):  # one command, one reply: anything more is out of step
            raise InvalidResponse(f"Protocol Error: {len(data) - end} bytes past the reply")
    except BaseException as exc:
        await conn.disconnect(nowait=True)
        if isinstance(exc, OSError):
            raise ConnectionError(f"Error while reading from Redis: {exc.args}") from exc
        raise
    if isinstance(reply, ResponseError):
        if isinstance(reply, ReadOnlyError) and isinstance(conn, SentinelManagedConnection):
            # as redis-py's Sentinel-managed connection does: the primary it holds was
            # demoted, so drop it and ask the Sentinels for the new one at the next connect
            await conn.disconnect()
            raise ConnectionError("The previous master is now a slave") from reply
        raise reply from None
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
