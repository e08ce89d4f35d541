"""The agent's state directory: a record is adopted only by the very process it names.

A pid alone is no identity — after the engine died the pid may be reused by anything,
and adopting that would mean reporting it as the engine and one day SIGTERMing its
process group. These tests attack the check with a live process that is not the one
recorded: same pid with another argument list, same pid and argv with another creation
time, a zombie."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil

from fairgate.fleet.state import Record, StateDir, matching_process
from fairgate.fleet.v1 import fleet_pb2

ARGV = [sys.executable, "-c", "import time; time.sleep(60)"]


def started() -> subprocess.Popen[bytes]:
    """ARGV running: until its exec the child still shows the test runner's command line."""
    proc = subprocess.Popen(ARGV)
    deadline = time.monotonic() + 30
    while psutil.Process(proc.pid).cmdline() != ARGV:
        assert time.monotonic() < deadline, "the child never ran ARGV"
        time.sleep(0.01)
    return proc


def record_of(proc: subprocess.Popen[bytes], **changes: object) -> Record:
    process = psutil.Process(proc.pid)
    fields: dict[str, object] = {
        "replica_id": "r1",
        "spec": Record.spec_dict(fleet_pb2.ReplicaSpec(replica_id="r1", port=9000)),
        "argv": list(ARGV),
        "pid": proc.pid,
        "started_at": process.create_time(),
    }
    fields.update(changes)
    return Record(**fields)  # type: ignore[arg-type]


def test_only_the_recorded_process_is_adopted() -> None:
    proc = started()
    try:
        assert matching_process(record_of(proc)) is not None
        other_argv = [*ARGV[:-1], "import time; time.sleep(61)"]
        assert matching_process(record_of(proc, argv=other_argv)) is None
        later = psutil.Process(proc.pid).create_time() + 5
        assert matching_process(record_of(proc, started_at=later)) is None
        assert matching_process(record_of(proc, pid=0)) is None
        gone = record_of(proc)
        proc.kill()
        proc.wait()
        assert matching_process(gone) is None
    finally:
        proc.kill()
        proc.wait()


def test_a_zombie_is_not_an_engine() -> None:
    proc = started()
    record = record_of(proc)
    proc.kill()  # not reaped: a zombie until wait()
    try:
        process = psutil.Process(proc.pid)
        for _ in range(200):
            if process.status() == psutil.STATUS_ZOMBIE:
                break
            time.sleep(0.05)
        assert process.status() == psutil.STATUS_ZOMBIE
        assert matching_process(record) is None
    finally:
        proc.wait()


def test_records_round_trip_and_a_torn_file_is_skipped(tmp_path: Path) -> None:
    state = StateDir(tmp_path / "agent")
    state.lock()
    try:
        spec = fleet_pb2.ReplicaSpec(replica_id="r/../1", engine="sim", port=9000, generation=3)
        record = Record("r/../1", Record.spec_dict(spec), ["x"], pid=5, state="crash_loop")
        state.save(record)
        (state.replicas / "torn.json").write_text('{"replica_id": ')
        (loaded,) = state.records()
        assert loaded == record and loaded.replica_spec() == spec
        assert all(p.parent == state.replicas for p in state.replicas.iterdir())
        assert oct((tmp_path / "agent").stat().st_mode & 0o777) == "0o700"
        state.save_applied_version(7)
        assert StateDir(tmp_path / "agent").applied_version() == 7
        assert json.loads((tmp_path / "agent" / "agent.json").read_text()) == {"applied_version": 7}
        state.forget("r/../1")
        assert [p.name for p in state.replicas.glob("*.json")] == ["torn.json"]
    finally:
        state.unlock()
