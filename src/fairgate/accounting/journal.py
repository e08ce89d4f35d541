"""The usage-record journal: each record appended to a local file as it is produced.

    journal = Journal(Path("/var/lib/fairgate/journal"), max_bytes=256 * 2**20)
    journal.open()                        # adopts the segments a dead process left
    seq = journal.append(record)          # None: not journaled (the bound is reached)
    journal.settle(seq)                   # the record is in the store now
    intent = journal.intend(entry)        # before an engine starts: what a kill would owe
    journal.retire(intent)                # the request's own record is journaled now
    journal.spill(seq)                    # the record left memory unwritten: the file keeps it
    segment = journal.next_spilled()      # a segment whose records must be read back
    records = journal.read(segment); …; journal.done(segment)

Why a file and no fsync: a process killed with SIGKILL loses its memory, not
the kernel's page cache, so a plain ``write(2)`` that returned is enough for
the records to outlive the process; only the machine crashing can lose pages
the kernel had not written yet. An fsync per record would cost a disk flush
per request for that case alone.

The journal is a directory of **segments**, ``<seq>-<token>.jsonl``, one JSON
object per line. Each process appends to a segment of its own and holds an
exclusive ``flock`` on every segment it owns, so several processes (workers,
or a restarted gateway beside its dead predecessor's files) can share one
directory: a segment whose lock can be taken belongs to a process that is gone
and is **adopted**, its records written to the store again. Writing a record
twice stores it once (``request_id`` is the key), which is what makes reading a
whole segment back always safe.

A segment is deleted once every record in it is known to be in the store. A
record that leaves the in-memory queue without being written (displaced from a
full queue, or in a batch the store refused twice) **spills**: its segment is
kept and read back whole when the store answers again. The directory never
holds more than ``max_bytes``: past that, :meth:`append` refuses and the
record lives in memory only (the recorder then drops and counts what does not
fit there).

**Write-ahead entries.** Before a request reaches an engine, the gateway journals
an *entry* (an intent): the values of the record the request would have if it ended
there and then (``ENTRY_FIELDS``, a compact JSON array: building and encoding the
whole record on every attempt cost four times as much), charged its reservation; the
record it stands for (``entry_record``) has outcome ``interrupted`` and is flagged
estimated. An entry made after attempts on other models went unanswered ends with
their part of the cost (``other_costs``, as the record's); one without it (the common
case, and every entry of an earlier version) stands for a record charged to its model
whole. The request's own record supersedes it (:meth:`retire`, as that record is
appended); an entry is never written to the store by its own process. When a process
dies, the requests it still had in flight have no record; their entries stand for
them. :func:`unmatched` reads the segments adopted from dead processes and returns
the records of the entries no record of the same request follows (the last entry of
a request that was retried), which the adopting process journals and writes. A
segment holding an entry not yet retired is kept, even when all its records are
stored.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import secrets
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from fairgate.accounting.record import UsageRecord

__all__ = ["ENTRY_FIELDS", "INTERRUPTED", "Journal", "Segment", "entry_record", "unmatched"]

log = logging.getLogger("fairgate.accounting")

_SUFFIX = ".jsonl"
_FIELDS = frozenset(f.name for f in fields(UsageRecord))


@dataclass(eq=False, slots=True)
class Segment:
    """One journal file this process owns (holding its lock through ``fd``)."""

    path: Path
    fd: int
    size: int = 0
    pending: int = 0  # records appended here, still in memory, not yet in the store
    spilled: bool = False  # some record here must be read back from the file
    intents: int = 0  # write-ahead entries here of requests still in flight


_INTENT = b'{"intent":'

INTERRUPTED = "interrupted"  # the outcome of a record made from a write-ahead entry
# A write-ahead entry is the values of these fields of the record it stands for, in this
# order (a tuple: cheaper to build and encode than the record on every attempt); the
# others are set by ``entry_record``. ``at`` is in seconds since the epoch.
ENTRY_FIELDS = (
    "request_id",
    "at",
    "key_id",
    "org",
    "team",
    "project",
    "tags",
    "model",
    "pool",
    "replica",
    "route",
    "prompt_tokens",
    "completion_tokens",
    "cost_micro",
    "total_ms",
    "attempts",
    "client_addr",
    "other_costs",  # left out when empty, and by versions that did not split the cost
)
_ATTEMPTS = ENTRY_FIELDS.index("attempts")
_LENGTHS = (len(ENTRY_FIELDS) - 1, len(ENTRY_FIELDS))  # an entry without other_costs, or with


def encode(record: UsageRecord) -> bytes:
    """One journal line: the record as JSON (``at`` in RFC 3339), newline-terminated."""
    return orjson.dumps(record) + b"\n"


def encode_intent(entry: Sequence[object]) -> bytes:
    """One write-ahead line: ``{"intent": [<the values of ENTRY_FIELDS>]}``, which a record
    line never starts with (and which an older reader skips as unreadable)."""
    return _INTENT + orjson.dumps(entry) + b"}\n"


def entry_record(entry: Sequence[Any]) -> UsageRecord:
    """The record a write-ahead entry stands for: outcome ``interrupted``, status 0, its
    tokens (the reservation) flagged estimated. Raises ``ValueError``/``TypeError`` on a
    malformed entry."""
    if len(entry) not in _LENGTHS:
        raise ValueError(f"a write-ahead entry of {len(entry)} values")
    values = dict(zip(ENTRY_FIELDS, entry, strict=False))
    values["at"] = datetime.fromtimestamp(values["at"], UTC)
    values["tags"] = tuple(values["tags"] or ())
    values["other_costs"] = _other_costs(values.get("other_costs"))
    return UsageRecord(**values, status=0, outcome=INTERRUPTED, estimated=True)


def _other_costs(parts: Any) -> tuple[tuple[str, str | None, int], ...]:
    """A record's ``other_costs`` as JSON gave them back (lists), or none when absent (a
    line of a version that did not split the cost). Raises ``ValueError``/``TypeError``
    on a malformed one."""
    if not parts:
        return ()
    return tuple(
        [
            (str(model), None if pool is None else str(pool), int(micro))
            for model, pool, micro in parts
        ]
    )


def decode(line: bytes) -> UsageRecord:
    """The record of one journal line; raises ``ValueError``/``TypeError``/``KeyError`` on a
    line that is not one (a torn last line of a process killed mid-write, or a machine crash)."""
    return _record_of(orjson.loads(line))


def _record_of(data: dict[str, Any]) -> UsageRecord:
    values = {k: v for k, v in data.items() if k in _FIELDS}
    values["at"] = datetime.fromisoformat(values["at"])
    values["tags"] = tuple(values.get("tags") or ())
    values["other_costs"] = _other_costs(values.get("other_costs"))
    return UsageRecord(**values)


def _lines(paths: Sequence[Path], intents: bool) -> Iterator[Any]:
    """The parsed write-ahead entries (``intents``: each a list of ENTRY_FIELDS' values)
    or records of the files ``paths``; lines that do not parse are skipped
    (``Journal.read`` logs them)."""
    for path in paths:
        with open(path, "rb") as file:
            for line in file:
                if line.startswith(_INTENT) != intents or not line.strip():
                    continue
                try:
                    data = orjson.loads(line)
                    yield data["intent"] if intents else data
                except (ValueError, KeyError, TypeError):
                    continue


def _entry_key(entry: Any) -> tuple[str, int] | None:
    """(request id, attempts) of a parsed entry; None when it is not one."""
    if isinstance(entry, list) and len(entry) in _LENGTHS:
        request_id, attempts = entry[0], entry[_ATTEMPTS]
        if isinstance(request_id, str) and isinstance(attempts, int):
            return request_id, attempts
    return None


def unmatched(paths: Sequence[Path]) -> list[UsageRecord]:
    """The records of the write-ahead entries in the segments ``paths`` (of processes
    that are gone) that no record of the same request follows anywhere among them: for
    each such request its last entry (the most ``attempts``), in whatever order the
    files are read. Reads the files up to three times, keeping in memory the request
    ids of the entries and the records of those left over. Raises ``OSError``."""
    last: dict[str, int] = {}  # request id → the most attempts among its entries
    for entry in _lines(paths, intents=True):
        if (key := _entry_key(entry)) is not None:
            last[key[0]] = max(key[1], last.get(key[0], key[1]))
    if last:
        for data in _lines(paths, intents=False):
            if isinstance(data, dict):
                last.pop(str(data.get("request_id")), None)
    found: dict[str, UsageRecord] = {}
    if last:
        for entry in _lines(paths, intents=True):
            key = _entry_key(entry)
            if key is not None and last.get(key[0]) == key[1] and key[0] not in found:
                with contextlib.suppress(ValueError, TypeError):
                    found[key[0]] = entry_record(entry)
    return list(found.values())


class Journal:
    """The segments of one process in ``directory``; see the module docstring.

    ``max_bytes`` bounds the directory's segments this process knows of (its
    own and the adopted ones); ``segment_bytes`` is the size past which a new
    segment is started. Not thread-safe: one event loop owns it.
    """

    def __init__(self, directory: Path, *, max_bytes: int, segment_bytes: int = 4 * 2**20) -> None:
        if max_bytes < 1 or segment_bytes < 1:
            raise ValueError("max_bytes and segment_bytes must be >= 1")
        self.directory = directory
        self._max_bytes = max_bytes
        self._segment_bytes = segment_bytes
        self._token = secrets.token_hex(6)
        self._seq = 0
        self._segments: dict[int, Segment] = {}
        self._current: int | None = None
        self._bytes = 0
        self._refused = 0
        self._adopted: list[Path] = []  # adopted segments whose intents are still unread

    # -- life cycle -----------------------------------------------------------------

    def open(self) -> int:
        """Create the directory, adopt the segments no live process holds, start a segment
        of this process's own; returns how many segments were adopted. Raises ``OSError``."""
        self.directory.mkdir(parents=True, exist_ok=True)
        adopted = self.adopt()
        self._rotate(strict=True)
        return adopted

    def adopt(self) -> int:
        """Take the segments of processes that are gone (their lock is free): they are read
        back and written to the store like spilled ones. Returns how many were taken.

        A process's segments are taken together or not at all (they share the token in
        their names): one found dying half-way through them is left whole to the next
        pass, so its entries and the records that retire them are read in one pass."""
        owned = {segment.path for segment in self._segments.values()}
        owners: dict[str, list[Path]] = {}
        for path in sorted(self.directory.glob("*" + _SUFFIX)):
            if path not in owned:
                owners.setdefault(_token_of(path), []).append(path)
        taken = 0
        for paths in owners.values():
            locked = _lock_all(paths)
            for path, fd in locked:
                size = os.fstat(fd).st_size
                self._add(Segment(path, fd, size=size, spilled=True))
                self._adopted.append(path)
            taken += len(locked)
        if taken:
            log.warning("accounting: %d journal segments of an earlier process to replay", taken)
        return taken

    def take_adopted(self) -> list[Path]:
        """The segments adopted since the last call, for :func:`unmatched` (oldest first)."""
        adopted, self._adopted = self._adopted, []
        return adopted

    def close(self) -> None:
        """Delete the segments whose records are all stored, keep the others for the next
        start (they are adopted then), and release every lock."""
        kept = 0
        for seq, segment in list(self._segments.items()):
            if _finished(segment):
                self._delete(seq)
            else:
                kept += 1
                os.close(segment.fd)
                del self._segments[seq]
        self._current = None
        self._bytes = 0
        if kept:
            log.warning("accounting: %d journal segments kept for the next start", kept)

    # -- the hot path ---------------------------------------------------------------

    def append(self, record: UsageRecord) -> int | None:
        """Write ``record`` to the current segment; its segment's number, or None when it
        was not written (the bound is reached, or the write failed: logged)."""
        seq = self._current
        if seq is None or not self._write(seq, encode(record)):
            return None
        self._segments[seq].pending += 1
        self._after_write(seq)
        return seq

    def intend(self, entry: Sequence[object]) -> int | None:
        """Write the write-ahead entry ``entry`` (the values of ``ENTRY_FIELDS``; module
        docstring); its segment's number for :meth:`retire`, or None when it was not
        written (as :meth:`append`)."""
        seq = self._current
        if seq is None or not self._write(seq, encode_intent(entry)):
            return None
        self._segments[seq].intents += 1
        self._after_write(seq)
        return seq

    def retire(self, seq: int) -> None:
        """The write-ahead entry in segment ``seq`` is superseded (its request's record, or
        a later entry, is journaled): the segment no longer has to be kept for it."""
        segment = self._segments.get(seq)
        if segment is None:
            return
        segment.intents -= 1
        if _finished(segment) and seq != self._current:
            self._delete(seq)

    def _write(self, seq: int, line: bytes) -> bool:
        """Append ``line`` to segment ``seq``; False when the bound or the write refused it
        (logged)."""
        size = len(line)
        if self._bytes + size > self._max_bytes:
            self._refused += 1
            if self._refused == 1 or self._refused % 1000 == 0:
                log.error(
                    "accounting: the journal is full (%d bytes): %d records not journaled",
                    self._max_bytes,
                    self._refused,
                )
            return False
        segment = self._segments[seq]
        try:
            os.write(segment.fd, line)
        except OSError as exc:
            log.error("accounting: a journal write failed (%s)", exc.strerror or exc)
            return False
        segment.size += size
        self._bytes += size
        return True

    def _after_write(self, seq: int) -> None:
        if self._segments[seq].size >= self._segment_bytes:
            self._rotate()

    # -- what became of a journaled record ------------------------------------------

    def settle(self, seq: int) -> None:
        """One record of segment ``seq`` is in the store; the segment goes once all are."""
        segment = self._segments.get(seq)
        if segment is None:
            return  # read back from the file and deleted already
        segment.pending -= 1
        if _finished(segment):
            if seq == self._current:
                if segment.size >= self._segment_bytes // 64:
                    self._rotate()  # a fresh file, so that a kill replays little
            else:
                self._delete(seq)

    def spill(self, seq: int) -> None:
        """One record of segment ``seq`` left memory unwritten: keep the segment to read back."""
        segment = self._segments.get(seq)
        if segment is not None:
            segment.pending -= 1
            segment.spilled = True

    def next_spilled(self) -> Segment | None:
        """The oldest segment to read back (the current one is closed first), or None."""
        for seq, segment in sorted(self._segments.items()):
            if segment.spilled:
                if seq == self._current:
                    self._rotate()
                return segment
        return None

    def read(self, segment: Segment) -> list[UsageRecord]:
        """Every whole record of ``segment``'s file, write-ahead entries left out (lines
        that do not parse are logged and skipped: only a torn last line or a machine crash
        makes one)."""
        records: list[UsageRecord] = []
        bad = 0
        with open(segment.path, "rb") as file:
            for line in file:
                if not line.strip() or line.startswith(_INTENT):
                    continue
                try:
                    records.append(decode(line))
                except (ValueError, TypeError, KeyError):
                    bad += 1
        if bad:
            log.error("accounting: %d unreadable lines in journal %s", bad, segment.path.name)
        return records

    def done(self, segment: Segment) -> None:
        """Every record of ``segment`` was read back into the store: delete it, unless it
        holds a write-ahead entry still needed (then it is kept until that is retired)."""
        for seq, known in list(self._segments.items()):
            if known is segment:
                if segment.intents > 0:
                    segment.pending = 0
                    segment.spilled = False
                else:
                    self._delete(seq)

    # -- figures --------------------------------------------------------------------

    @property
    def bytes(self) -> int:
        """Bytes in the segments this process owns."""
        return self._bytes

    @property
    def spilled(self) -> int:
        """Segments waiting to be read back."""
        return sum(1 for segment in self._segments.values() if segment.spilled)

    # -- internals ------------------------------------------------------------------

    def _add(self, segment: Segment) -> int:
        self._seq += 1
        self._segments[self._seq] = segment
        self._bytes += segment.size
        return self._seq

    def _rotate(self, *, strict: bool = False) -> None:
        """Start a new current segment; the old one goes if nothing of it is pending.
        When the file cannot be made, the old segment stays current (``strict``: raise)."""
        old = self._current
        path = self.directory / f"{self._seq + 1:012d}-{self._token}{_SUFFIX}"
        # Made under a name adoption does not list and named once locked: a sibling
        # adopting at that moment cannot take a file its maker has not locked yet.
        making = path.with_name(path.name + ".new")
        fd = -1
        try:
            fd = os.open(making, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            making.rename(path)
        except OSError as exc:
            if fd >= 0:
                os.close(fd)
            if strict:
                raise
            log.error("accounting: a new journal segment failed (%s)", exc.strerror or exc)
            return
        self._current = self._add(Segment(path, fd))
        if old is not None and _finished(self._segments[old]):
            self._delete(old)

    def _delete(self, seq: int) -> None:
        segment = self._segments.pop(seq)
        self._bytes -= segment.size
        with contextlib.suppress(FileNotFoundError):
            segment.path.unlink()
        os.close(segment.fd)
        if seq == self._current:
            self._current = None


def _token_of(path: Path) -> str:
    """The owning process's token in a segment's name, ``<seq>-<token>.jsonl``."""
    stem = path.name.removesuffix(_SUFFIX)
    return stem.partition("-")[2] or stem


def _lock_all(paths: Sequence[Path]) -> list[tuple[Path, int]]:
    """Open and lock every one of ``paths`` still there; none (every lock given back) when
    one is held, by its owner alive or by a sibling adopting them at the same time."""
    locked: list[tuple[Path, int]] = []
    for path in paths:
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
        except FileNotFoundError:
            continue  # deleted by its owner since the listing
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            for _, taken in locked:
                os.close(taken)  # closing the descriptor gives its lock back
            return []
        locked.append((path, fd))
    return locked


def _finished(segment: Segment) -> bool:
    """Nothing of ``segment`` is needed any more: every record stored, no entry live."""
    return segment.pending <= 0 and segment.intents <= 0 and not segment.spilled
