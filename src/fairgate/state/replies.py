"""RESP replies parsed straight from the bytes a read brought, for ``state.scripts``.

Why not redis-py's reader: without hiredis, redis-py's Python parser reads a reply a
line at a time, each line through its own ``_readline``, the stream's ``readline``
and ``readuntil`` and a coroutine per element (~13 Python calls a line); the way-in
script's reply is ~18 lines, so measured on the full path
(``benchmarks/cpu_profile.py --state redis --profile``) this parser took the
gateway's Python calls from 1,356 to 1,138 a request, and reads the way-in reply in
~12 µs where redis-py's took ~44. ``parse`` walks the bytes in one loop with a stack
of the aggregates still open: a ``find`` and an ``append`` an element. A reply split
across reads is parsed again from its start once more bytes arrive (these replies are
a few hundred bytes); the replies of several pipelined commands in one read are
parsed one after the other (``pos``).

Every reply type of RESP2 and RESP3 comes back as redis-py (``decode_responses``
off) gives it: integers and big numbers as ``int``, bulk, simple and verbatim
strings as ``bytes`` (a verbatim one without its format), nil as ``None``, doubles
as ``float``, booleans as ``bool``, arrays and sets as lists, maps as dicts, errors
as redis-py's exception for their code (``NoScriptError``, ``BusyLoadingError``,
``OutOfMemoryError`` …, by redis-py's own table): returned, not raised, for the caller
of that command to raise, whether the reply is one or holds one in an array. An error
of redis-py's connection kind (``max number of clients``) is raised at once. A push
message ahead of a reply is skipped.

``ReplyThenCancelled``: what a caller that must know what its script did even when it
is cancelled (the store's way in and way out: a charge made for a caller gone is given
back) gets: the cancellation, raised once the reply came, with the reply.
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis._parsers import BaseParser
from redis.exceptions import ConnectionError, InvalidResponse, ResponseError

__all__ = ["ReplyThenCancelled", "parse"]

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


def parse(data: bytes, pos: int = 0) -> tuple[Any, int] | None:
    """The first reply in ``data`` from ``pos`` and where it ends, or ``None`` when
    ``data`` holds only its beginning (raises ``InvalidResponse`` on what is not RESP,
    and an error reply of redis-py's ``ConnectionError`` kind, e.g. "max number of
    clients")."""
    size = len(data)
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
