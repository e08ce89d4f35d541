"""The usage-record journal against a real store: what a SIGKILLed process journaled reaches
the store at the next start, a stalled store spills to the journal instead of dropping,
the journal's bound drops and counts, and a clean drain leaves no file behind."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from sqlalchemy import select

from accounting.samples import entry, hold_write_lock, record, stored_count
from fairgate.accounting import Recorder, StoreUsageWriter, spend
from fairgate.accounting.journal import (
    Journal,
    decode,
    encode,
    encode_intent,
    entry_record,
    unmatched,
)
from fairgate.store import Store
from fairgate.store.tables import usage_records
from fairgate.tenancy import Actor

DEADLINE = 30.0

# A child that journals ``count`` records, prints "ready", then waits (or kills itself).
_CHILD = """
import os, signal, sys
from datetime import UTC, datetime
from pathlib import Path
from fairgate.accounting import UsageRecord
from fairgate.accounting.journal import Journal
journal = Journal(Path(sys.argv[1]), max_bytes=2**30)
journal.open()
for i in range(int(sys.argv[2])):
    at = datetime.now(UTC)
    journal.append(UsageRecord(request_id=f"child-{i}", at=at, key_id="k", org="A", team="a1",
                               tags=("x",), cost_micro=i, replica="r1", attempts=1))
print("ready", flush=True)
if sys.argv[3] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
sys.stdin.read()
"""


def journal_child(directory: Path, count: int, end: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(directory), str(count), end],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    return child


def ended(child: subprocess.Popen[str]) -> int:
    """Kill ``child`` if it still runs; its exit status, its pipes closed."""
    child.kill()
    status = child.wait(DEADLINE)
    for pipe in (child.stdin, child.stdout):
        if pipe is not None:
            pipe.close()
    return status


def segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.jsonl"))


async def stored_ids(store: Store) -> set[str]:
    async with store.read() as conn:
        return set((await conn.execute(select(usage_records.c.request_id))).scalars())


async def test_what_a_sigkilled_process_journaled_reaches_the_store_at_the_next_start(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "journal"
    child = journal_child(directory, 300, "kill")
    assert child.wait(DEADLINE) == -signal.SIGKILL
    ended(child)
    (segment,) = segments(directory)
    with segment.open("ab") as file:
        file.write(b'{"request_id": "torn-by-a-cr')  # a line cut short by a machine crash
    recorder = Recorder(StoreUsageWriter(store), journal=Journal(directory, max_bytes=2**30))
    with caplog.at_level(logging.ERROR, logger="fairgate.accounting"):
        assert await recorder.open() == 300
    assert await stored_ids(store) == {f"child-{i}" for i in range(300)}
    assert any("unreadable lines" in r.getMessage() for r in caplog.records)
    assert segment not in segments(directory)  # read back, then deleted
    assert await recorder.drain(timeout=DEADLINE) is True
    assert segments(directory) == []
    assert recorder.stats.replayed == 300


async def test_the_segments_of_a_live_process_are_left_to_it(store: Store, tmp_path: Path) -> None:
    directory = tmp_path / "journal"
    child = journal_child(directory, 20, "wait")
    try:
        other = Journal(directory, max_bytes=2**30)
        assert other.open() == 0  # its lock is held: nothing to adopt
        assert other.adopt() == 0
        ended(child)
        assert other.adopt() == 1  # the owner is gone: its segment is taken over
        segment = other.next_spilled()
        assert segment is not None
        assert [r.request_id for r in other.read(segment)] == [f"child-{i}" for i in range(20)]
        other.done(segment)
        other.close()
    finally:
        ended(child)
    assert segments(directory) == []


async def test_a_stalled_store_spills_to_the_journal_and_nothing_is_dropped(
    store: Store, store_url: str, tmp_path: Path
) -> None:
    impatient = Store(store_url, timeout=1.0)
    await impatient.connect()
    spilled: list[int] = []
    recorder = Recorder(
        StoreUsageWriter(impatient),
        capacity=20,
        batch_size=10,
        flush_interval=0.05,
        retry_delay=0.01,
        on_spilled=spilled.append,
        journal=Journal(tmp_path / "journal", max_bytes=2**30),
    )
    recorder.start()
    sent = [record() for _ in range(200)]
    async with hold_write_lock(store):
        for rec in sent:
            assert recorder.record(rec) is True
        end = time.monotonic() + DEADLINE
        while recorder.stats.spilled < 180 and time.monotonic() < end:
            await asyncio.sleep(0.05)
        assert await stored_count(store) == 0
    assert await recorder.drain(timeout=DEADLINE) is True
    await impatient.close()
    assert await stored_ids(store) == {rec.request_id for rec in sent}
    stats = recorder.stats
    assert (stats.dropped, stats.failed) == (0, 0)
    assert stats.spilled == sum(spilled) >= 180
    assert segments(tmp_path / "journal") == []


async def test_past_the_journal_bound_records_are_dropped_and_counted(
    store: Store, store_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bound = 20 * len(encode(record()))
    impatient = Store(store_url, timeout=1.0)
    await impatient.connect()
    dropped: list[int] = []
    recorder = Recorder(
        StoreUsageWriter(impatient),
        capacity=10,
        batch_size=5,
        flush_interval=3600,
        on_dropped=dropped.append,
        journal=Journal(tmp_path / "journal", max_bytes=bound),
    )
    recorder.start()
    with caplog.at_level(logging.ERROR, logger="fairgate.accounting"):
        async with hold_write_lock(store):
            for _ in range(100):
                recorder.record(record())
            size = sum(p.stat().st_size for p in segments(tmp_path / "journal"))
        assert await recorder.drain(timeout=DEADLINE) is True
    await impatient.close()
    assert size <= bound
    stored = await stored_count(store)
    # 20 journaled (their place in memory taken by later ones: spilled, then read back),
    # and what the memory queue held past them; the rest dropped, each one counted.
    assert 20 <= stored < 100
    assert recorder.stats.dropped == sum(dropped) == 100 - stored
    assert any("journal is full" in r.getMessage() for r in caplog.records)


async def test_a_clean_drain_writes_everything_and_leaves_no_journal(
    store: Store, tmp_path: Path
) -> None:
    directory = tmp_path / "journal"
    recorder = Recorder(
        StoreUsageWriter(store),
        batch_size=50,
        flush_interval=0.01,
        journal=Journal(directory, max_bytes=2**30, segment_bytes=4096),
    )
    recorder.start()
    for _ in range(1000):
        recorder.record(record())
        if len(segments(directory)) > 5:
            await asyncio.sleep(0.01)
    # Written segments go while serving, not at the end.
    loop = asyncio.get_running_loop()
    until = loop.time() + DEADLINE
    while len(segments(directory)) > 3 and loop.time() < until:
        await asyncio.sleep(0.02)
    assert len(segments(directory)) <= 3
    assert await recorder.drain(timeout=DEADLINE) is True
    assert await stored_count(store) == 1000
    assert segments(directory) == []


def test_a_journal_line_is_the_record() -> None:
    rec = record(tags=("a", "b|c"), project="p", ttft_ms=None, estimated=True)
    assert decode(encode(rec)) == rec
    with pytest.raises(ValueError):
        decode(b'{"request_id": "x"')


def test_a_write_ahead_entry_is_the_record_of_an_interrupted_request() -> None:
    rec = record(tags=("a",), project="p", completion_tokens=500, cost_micro=900, attempts=2)
    line = encode_intent(entry(rec))
    assert line.startswith(b'{"intent":') and line.endswith(b"}\n")
    made = entry_record(orjson.loads(line)["intent"])
    # what the entry does not carry: the outcome, the status, the flag, the first byte
    assert made == replace(rec, outcome="interrupted", status=0, estimated=True, ttft_ms=None)


FELL_BACK = (("dear", "big", 1_000),)  # a dear attempt that timed out before "m" served


def test_a_journal_line_keeps_the_parts_of_the_cost_charged_to_other_models() -> None:
    rec = record(model="m", cost_micro=1_030, other_costs=FELL_BACK)
    line = encode(rec)
    assert decode(line) == rec
    # a line of an earlier version, which did not split the cost: all of it the model's
    older = orjson.loads(line)
    del older["other_costs"]
    assert decode(orjson.dumps(older)) == replace(rec, other_costs=())


def test_a_write_ahead_entry_keeps_the_parts_charged_to_other_models() -> None:
    rec = record(model="m", cost_micro=1_030, attempts=2, other_costs=FELL_BACK)
    made = entry_record(orjson.loads(encode_intent(entry(rec)))["intent"])
    assert made.other_costs == FELL_BACK
    # an entry of an earlier version ends before other_costs: charged to its model whole
    older = entry_record(orjson.loads(encode_intent(entry(rec)[:-1]))["intent"])
    assert (older.model, older.cost_micro, older.other_costs) == ("m", 1_030, ())


async def test_entries_old_and_new_of_a_killed_process_are_both_charged(
    store: Store, tmp_path: Path
) -> None:
    """A dead process's segments hold an entry without the split (an earlier version's) and
    one with it: the next start writes a record for each, the part under its model."""
    directory = tmp_path / "journal"
    dead = Journal(directory, max_bytes=2**30)
    dead.open()
    dead.intend(entry(record(request_id="old", model="m", cost_micro=1_030))[:-1])
    dead.intend(entry(record(request_id="new", model="m", cost_micro=1_030, other_costs=FELL_BACK)))
    dead.close()
    recorder = Recorder(StoreUsageWriter(store), journal=Journal(directory, max_bytes=2**30))
    await recorder.open()
    try:
        report = await spend(store, Actor.operator("t"), "2025-10-01", "2025-10-02", ("model",))
    finally:
        assert await recorder.drain(timeout=DEADLINE) is True
    by_model = {row.groups: (row.requests, row.cost_micro) for row in report.rows}
    assert by_model == {("m",): (2, 1_030 + 30), ("dear",): (0, 1_000)}
    assert report.total.cost_micro == 2 * 1_030


async def test_a_drain_while_the_store_stalls_keeps_the_records_for_the_next_start(
    store: Store, store_url: str, tmp_path: Path
) -> None:
    directory = tmp_path / "journal"
    impatient = Store(store_url, timeout=1.0)
    await impatient.connect()
    recorder = Recorder(
        StoreUsageWriter(impatient),
        batch_size=10,
        flush_interval=0.05,
        retry_delay=0.01,
        journal=Journal(directory, max_bytes=2**30),
    )
    recorder.start()
    sent = [record() for _ in range(30)]
    async with hold_write_lock(store):
        for rec in sent:
            recorder.record(rec)
        assert await recorder.drain(timeout=DEADLINE) is False  # not all in the store
    await impatient.close()
    assert (recorder.stats.dropped, recorder.stats.failed) == (0, 0)
    assert await stored_count(store) == 0
    assert segments(directory)  # kept, for the next process

    again = Recorder(StoreUsageWriter(store), journal=Journal(directory, max_bytes=2**30))
    assert await again.open() == 30
    assert await stored_ids(store) == {rec.request_id for rec in sent}
    assert await again.drain(timeout=DEADLINE) is True
    assert segments(directory) == []


# A child that, on segments of one line each, journals the write-ahead entry of four
# requests: "done" gets its record after it, "retried" a second entry (a retry: two
# reservations), "cut" and "retried" nothing more; then it kills itself.
_INTENT_CHILD = """
import os, signal, sys, time
from datetime import UTC, datetime
from pathlib import Path
from fairgate.accounting import UsageRecord
from fairgate.accounting.journal import Journal

def rec(rid, tokens, attempts):
    return UsageRecord(request_id=rid, at=datetime.now(UTC), key_id="k", org="A", team="a1",
                       model="m", replica="r1", status=200, completion_tokens=tokens,
                       cost_micro=tokens, attempts=attempts)

def entry(rid, tokens, attempts):  # the values of journal.ENTRY_FIELDS
    return (rid, time.time(), "k", "A", "a1", None, (), "m", None, "r1", "chat", 0, tokens,
            tokens, 5, attempts, "")

journal = Journal(Path(sys.argv[1]), max_bytes=2**30, segment_bytes=1)
journal.open()
done = journal.intend(entry("done", 50, 1))
first = journal.intend(entry("retried", 50, 1))
journal.intend(entry("cut", 50, 1))
journal.append(rec("done", 12, 1))
journal.retire(done)
journal.intend(entry("retried", 100, 2))
journal.retire(first)
print("ready", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


async def test_requests_a_killed_process_had_in_flight_are_charged_their_reservation(
    store: Store, tmp_path: Path
) -> None:
    directory = tmp_path / "journal"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.run(
        [sys.executable, "-c", _INTENT_CHILD, str(directory)],
        capture_output=True,
        text=True,
        env=env,
        timeout=DEADLINE,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    # the entry of "done" went with its segment once its record was journaled
    assert len(segments(directory)) == 4
    recorder = Recorder(StoreUsageWriter(store), journal=Journal(directory, max_bytes=2**30))
    await recorder.open()
    async with store.read() as conn:
        rows = (
            await conn.execute(
                select(
                    usage_records.c.request_id,
                    usage_records.c.outcome,
                    usage_records.c.completion_tokens,
                    usage_records.c.estimated,
                    usage_records.c.attempts,
                )
            )
        ).all()
    assert sorted(map(tuple, rows)) == [
        ("cut", "interrupted", 50, True, 1),
        ("done", "ok", 12, False, 1),  # its record, not its entry
        ("retried", "interrupted", 100, True, 2),  # the last entry: both attempts
    ]
    assert await recorder.drain(timeout=DEADLINE) is True
    assert segments(directory) == []


async def test_an_entry_whose_record_is_in_a_later_segment_is_not_charged_again(
    store: Store, tmp_path: Path
) -> None:
    """The adopting process matches entries and records across every adopted segment, in
    whatever order it reads them: a request recorded is never charged its entry too."""
    directory = tmp_path / "journal"
    dead = Journal(directory, max_bytes=2**30, segment_bytes=1)
    dead.open()
    dead.intend(entry(record(request_id="r", completion_tokens=500)))
    dead.append(record(request_id="r", completion_tokens=20))
    dead.close()  # a process gone: both segments kept (nothing was stored or retired)
    names = segments(directory)
    assert len(names) == 2
    # the record's segment named first: read before the entry's
    names[1].rename(directory / ("0" + names[1].name))
    recorder = Recorder(StoreUsageWriter(store), journal=Journal(directory, max_bytes=2**30))
    await recorder.open()
    async with store.read() as conn:
        rows = (
            await conn.execute(select(usage_records.c.request_id, usage_records.c.outcome))
        ).all()
    assert list(map(tuple, rows)) == [("r", "ok")]
    assert await recorder.drain(timeout=DEADLINE) is True


def test_a_segment_is_kept_while_an_entry_in_it_is_live(tmp_path: Path) -> None:
    """A request's entry and another's record in one segment: read back after a spill,
    the entry is not a record, and the segment outlives its records while the entry
    stands for a request in flight."""
    directory = tmp_path / "journal"
    journal = Journal(directory, max_bytes=2**30)
    journal.open()
    live = journal.intend(entry(record(request_id="r")))
    seq = journal.append(record(request_id="s"))
    assert live is not None and seq == live
    journal.spill(seq)  # the record left memory unwritten
    spilled = journal.next_spilled()
    assert spilled is not None
    assert [r.request_id for r in journal.read(spilled)] == ["s"]
    journal.done(spilled)  # "s" is in the store now
    assert spilled.path.exists()  # "r" is still in flight
    journal.retire(live)  # its request's record is journaled
    assert not spilled.path.exists()
    journal.close()
    assert segments(directory) == []


async def test_an_entry_the_journal_cannot_take_leaves_the_earlier_one_standing(
    store: Store, tmp_path: Path
) -> None:
    first = entry(record(request_id="r"))
    bound = len(encode_intent(first)) + 10  # room for one entry, not two
    directory = tmp_path / "journal"
    recorder = Recorder(StoreUsageWriter(store), journal=Journal(directory, max_bytes=bound))
    recorder.open_journal()
    kept = recorder.intend(first)
    assert kept is not None
    # the retry's entry is refused (the bound): the first attempt's still stands for it
    assert recorder.intend(entry(record(request_id="r", attempts=2)), kept) == kept
    [segment] = segments(directory)
    assert segment.read_bytes().count(b'{"intent":') == 1
    recorder.retire(kept)
    assert await recorder.drain(timeout=DEADLINE) is True
    assert segments(directory) == []


def test_a_process_found_dying_half_way_is_adopted_whole_at_the_next_pass(
    tmp_path: Path,
) -> None:
    """Its entries and the records that retire them are read in one pass: adopted in two,
    an entry read first would be charged its reservation although its request had a
    record (stored first, the interrupted record would win over the real one)."""
    directory = tmp_path / "journal"
    dead = Journal(directory, max_bytes=2**30, segment_bytes=1)
    dead.open()
    dead.intend(entry(record(request_id="r", completion_tokens=500)))
    dead.append(record(request_id="r", completion_tokens=20))
    dead.close()
    entry_segment, record_segment = segments(directory)
    # the owner's lock on its later segment, as if it were still exiting
    held = os.open(record_segment, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)
    other = Journal(directory, max_bytes=2**30)
    try:
        other.open()
        assert other.take_adopted() == []  # not the first segment alone
        os.close(held)
        assert other.adopt() == 2
        adopted = other.take_adopted()
        assert adopted == [entry_segment, record_segment]
        assert unmatched(adopted) == []  # "r" has its record: nothing to charge
    finally:
        other.close()


def test_a_sibling_adopting_cannot_take_a_segment_being_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers start together on one directory: a sibling's adoption that runs between a
    segment's creation and its lock must not take it (the maker could then not start)."""
    directory = tmp_path / "journal"
    directory.mkdir()
    sibling = Journal(directory, max_bytes=2**30)
    real_flock = fcntl.flock
    taken: list[int] = []
    raced = False

    def flock_after_a_sibling_adopts(fd: int, operation: int) -> None:
        nonlocal raced
        if not raced:  # the maker's lock, first of all: the sibling gets there before it
            raced = True
            taken.append(sibling.adopt())
        real_flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", flock_after_a_sibling_adopts)
    maker = Journal(directory, max_bytes=2**30)
    maker.open()
    monkeypatch.setattr(fcntl, "flock", real_flock)
    assert taken == [0]
    [made] = segments(directory)
    assert maker.append(record(request_id="m")) is not None
    assert b'"m"' in made.read_bytes()
    maker.close()
    sibling.close()
