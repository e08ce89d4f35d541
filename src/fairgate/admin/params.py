"""Parameters of the admin API, checked in one place: text without control characters,
and numbers the store can hold.

``plain_text`` is a dependency of the whole admin application: before any handler
runs, every path parameter, query parameter and string in a JSON body is refused
with 400 when it holds a control character (U+0000–U+001F, U+007F). PostgreSQL
cannot store U+0000 at all (the driver fails and the store looks down: a 503),
SQLite would store it, and no name, id or scope of the tree has a use for one.

The numeric query parameters use the types below, whose bounds FastAPI checks
(a 400 envelope, like every validation error of the admin API):

    Moment   a Unix time in seconds, 0 .. 9999-12-31T23:59:59Z; nan and inf refused
    RowId    a row id, 1 .. 2**63 - 1 (the store's BIGINT)
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import Annotated

import orjson
from fastapi import Query
from starlette.requests import Request

from fairgate.core.errors import BadRequest

__all__ = ["Moment", "RowId", "plain_text"]

log = logging.getLogger("fairgate.admin")

_LAST_MOMENT = 253_402_300_799  # 9999-12-31T23:59:59Z, the last second a datetime holds
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

Moment = Annotated[float | None, Query(ge=0, le=_LAST_MOMENT, allow_inf_nan=False)]
RowId = Annotated[int | None, Query(ge=1, le=2**63 - 1)]


async def plain_text(request: Request) -> None:
    """Refuse (400 ``invalid_parameter``) a request whose path, query or JSON body holds
    a control character; the message says where, never echoes the value."""
    where = next(_places(request, await _json(request)), None)
    if where is not None:
        path = request.url.path.encode("unicode_escape").decode()
        log.info("admin API: %s %s refused: control character in %s", request.method, path, where)
        raise BadRequest(f"{where} holds a control character", code="invalid_parameter")


def _places(request: Request, body: object) -> Iterator[str]:
    """Where control characters are: ``path parameter 'name'``, ``query parameter 'org'``…"""
    for name, value in request.path_params.items():
        if isinstance(value, str) and _CONTROL.search(value):
            yield f"path parameter {name!r}"
    for name, value in request.query_params.multi_items():
        if _CONTROL.search(name):
            yield "a query parameter's name"
        elif _CONTROL.search(value):
            yield f"query parameter {name!r}"
    if _has_control(body):
        yield "the body"


async def _json(request: Request) -> object:
    """The body as JSON, or None when it is empty or not JSON (FastAPI answers that)."""
    raw = await request.body()
    if not raw:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


def _has_control(body: object) -> bool:
    """Whether any string (key or value) in a parsed JSON document holds a control
    character; walked with a stack, so a deeply nested body cannot exhaust recursion."""
    stack = [body]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            if _CONTROL.search(value):
                return True
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return False
