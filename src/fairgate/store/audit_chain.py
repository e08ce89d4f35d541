"""The audit trail's hash chain: each event sealed with the hash of the one before it.

    hash(n) = SHA-256( canonical(seq n, at, actor, action, target, org_id, team_id,
                                 remote, detail, prev_hash = hash(n-1)) )

``seq`` counts events 1, 2, 3 … with no gap (ids may have gaps: a rolled-back
PostgreSQL transaction consumes one), and event 1 links to ``GENESIS`` (32 zero
bytes). The canonical encoding is orjson with sorted keys, ``at`` as integer
microseconds since the epoch and ``prev_hash`` in hex, so the same row read back
from SQLite or PostgreSQL hashes to the same value.

Changing a row's content breaks its own hash; deleting a row leaves a gap in
``seq`` and a link that points at nothing. What the chain cannot show: someone
who can write to the database can recompute every hash from the row they change
onwards, and deleting the newest events leaves a shorter chain that verifies.
Anchoring the head elsewhere is the answer: every append logs its ``seq`` and
head hash, and ``fairgate audit verify`` prints the head it reached.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

__all__ = [
    "GENESIS",
    "Break",
    "ChainCheck",
    "ChainHead",
    "ChainedRow",
    "event_hash",
    "first_break",
    "row_hash",
]

GENESIS = bytes(32)
"""What the first event links to."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class ChainedRow:
    """One audit row as the chain sees it (every column the hash covers, plus ``id``)."""

    id: int
    seq: int
    at: datetime
    actor: str
    action: str
    target: str | None
    org_id: int | None
    team_id: int | None
    remote: str | None
    detail: Mapping[str, Any] | None
    prev_hash: bytes
    hash: bytes


@dataclass(frozen=True, slots=True)
class ChainHead:
    """The newest event of an intact chain (``seq`` 0 and ``GENESIS``: no event yet)."""

    seq: int
    hash: bytes


@dataclass(frozen=True, slots=True)
class Break:
    """The first broken link: the event where it shows (``event_id``) and what is wrong.

    ``kind`` is ``content_changed`` (the event's own hash no longer matches its
    content), ``link_broken`` (its ``prev_hash`` is not the previous event's
    hash) or ``event_missing`` (``seq`` skips one or more events before it).
    """

    event_id: int
    seq: int
    kind: str
    message: str


def event_hash(
    *,
    seq: int,
    at: datetime,
    actor: str,
    action: str,
    target: str | None,
    org_id: int | None,
    team_id: int | None,
    remote: str | None,
    detail: Mapping[str, Any] | None,
    prev_hash: bytes,
) -> bytes:
    """The 32-byte SHA-256 of an event's canonical encoding; see the module docstring."""
    document = {
        "seq": seq,
        "at": _micros(at),
        "actor": actor,
        "action": action,
        "target": target,
        "org_id": org_id,
        "team_id": team_id,
        "remote": remote,
        "detail": None if detail is None else dict(detail),
        "prev_hash": prev_hash.hex(),
    }
    return hashlib.sha256(orjson.dumps(document, option=orjson.OPT_SORT_KEYS)).digest()


class ChainCheck:
    """Checks rows fed in ``seq`` order; ``head`` is where an intact chain has got to.

    ``feed`` returns the first broken link, at the row where it shows, or None.
    Rows can be fed page by page, so a long trail is checked in bounded memory.
    """

    def __init__(self) -> None:
        self._seq = 0
        self._hash = GENESIS
        self._id: int | None = None

    @property
    def head(self) -> ChainHead:
        return ChainHead(self._seq, self._hash)

    def feed(self, row: ChainedRow) -> Break | None:
        after = "the start of the chain" if self._id is None else f"event {self._id}"
        if row.seq > self._seq + 1:
            first, last = self._seq + 1, row.seq - 1
            missing = f"{first}" if first == last else f"{first}-{last}"
            return Break(
                row.id, row.seq, "event_missing", f"event missing: seq {missing} after {after}"
            )
        if row.seq != self._seq + 1:
            return Break(
                row.id, row.seq, "link_broken", f"link broken: seq {row.seq} repeats after {after}"
            )
        if row.prev_hash != self._hash:
            return Break(
                row.id,
                row.seq,
                "link_broken",
                f"link broken: its prev_hash is not the hash of {after}",
            )
        if row_hash(row) != row.hash:
            return Break(
                row.id, row.seq, "content_changed", "content changed: its hash does not match"
            )
        self._seq, self._hash, self._id = row.seq, row.hash, row.id
        return None


def first_break(rows: Iterable[ChainedRow]) -> Break | ChainHead:
    """Walk ``rows`` in ``seq`` order: the first broken link, or the head of an intact chain."""
    check = ChainCheck()
    for row in rows:
        broken = check.feed(row)
        if broken is not None:
            return broken
    return check.head


def row_hash(row: ChainedRow) -> bytes:
    """The hash ``row``'s content and link call for (what an intact chain stored)."""
    return event_hash(
        seq=row.seq,
        at=row.at,
        actor=row.actor,
        action=row.action,
        target=row.target,
        org_id=row.org_id,
        team_id=row.team_id,
        remote=row.remote,
        detail=row.detail,
        prev_hash=row.prev_hash,
    )


def _micros(at: datetime) -> int:
    moment = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
