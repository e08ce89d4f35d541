"""What the node agent launched, on disk, so that a restarted agent re-adopts it.

One directory per agent (`--state-dir`): `lock` (held while the agent runs, so two
agents never supervise the same engines), `agent.json` (the last desired-state version
applied) and `replicas/ID.json` per replica — its spec, the argument list it was
launched with, its process id and creation time, and its last state (so a replica in
`crash_loop` stays there across an agent restart). `replicas/ID.log` is the engine's
output. The engine's environment is not written: it may hold the engine's API key.
`replicas/ID.key` (mode 0600) is the key the control plane sent for the replica (a
vault secret), which the engine and the agent read as its key file.

A record is adopted only when its process still runs with the same creation time (not
a later process that reuses the pid) and the same argument list (which holds the port).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO

import psutil
from google.protobuf import json_format

from fairgate.fleet.v1 import fleet_pb2

__all__ = [
    "Record",
    "StateDir",
    "StateDirBusy",
    "default_state_dir",
    "matching_process",
    "safe_name",
    "write_private",
]


class StateDirBusy(RuntimeError):
    """Another agent holds the state directory."""


def default_state_dir(node_name: str) -> Path:
    """`/var/lib/fairgate/agent/NODE` for root, else `$XDG_STATE_HOME/fairgate/agent/NODE`
    (`~/.local/state/...`)."""
    if os.geteuid() == 0:
        base = Path("/var/lib/fairgate/agent")
    else:
        state_home = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        base = Path(state_home) / "fairgate" / "agent"
    return base / node_name


@dataclass(slots=True)
class Record:
    replica_id: str
    spec: dict[str, object]
    """The ReplicaSpec as protobuf's JSON mapping."""
    argv: list[str]
    pid: int = 0
    started_at: float = 0.0
    state: str = "starting"
    exit_code: int | None = None
    tail: list[str] = field(default_factory=list)
    restarts: int = 0

    def replica_spec(self) -> fleet_pb2.ReplicaSpec:
        spec = fleet_pb2.ReplicaSpec()
        try:
            json_format.ParseDict(self.spec, spec)
        except json_format.ParseError as exc:
            raise ValueError(f"its spec does not parse: {exc}") from None
        return spec

    @staticmethod
    def spec_dict(spec: fleet_pb2.ReplicaSpec) -> dict[str, object]:
        return dict(json_format.MessageToDict(spec))


def matching_process(record: Record) -> psutil.Process | None:
    """The record's engine if it still runs as launched, else None."""
    if record.pid <= 0:
        return None
    try:
        process = psutil.Process(record.pid)
        if abs(process.create_time() - record.started_at) > 0.05:
            return None  # the pid now belongs to another process
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        if process.cmdline() != record.argv:
            return None
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    return process


class StateDir:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.replicas = path / "replicas"
        self._lock: IO[bytes] | None = None

    def lock(self) -> None:
        """Create the directory (mode 0700) and hold its lock; StateDirBusy if another
        agent holds it (the kernel releases it when that agent exits, even on SIGKILL)."""
        self.replicas.mkdir(parents=True, exist_ok=True)
        self.path.chmod(0o700)
        handle = (self.path / "lock").open("ab")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise StateDirBusy(
                f"another agent is running with the state directory {self.path}"
            ) from None
        self._lock = handle

    def unlock(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def log_path(self, replica_id: str) -> Path:
        return self.replicas / f"{safe_name(replica_id)}.log"

    def applied_version(self) -> int:
        try:
            return int(json.loads((self.path / "agent.json").read_text())["applied_version"])
        except (OSError, ValueError, KeyError, TypeError):
            return 0

    def save_applied_version(self, version: int) -> None:
        _write(self.path / "agent.json", {"applied_version": version})

    def records(self) -> list[Record]:
        out = []
        for path in sorted(self.replicas.glob("*.json")):
            try:
                out.append(Record(**json.loads(path.read_text())))
            except (OSError, ValueError, TypeError):
                continue  # a torn or foreign file: nothing to adopt from it
        return out

    def save(self, record: Record) -> None:
        _write(self.replicas / f"{safe_name(record.replica_id)}.json", asdict(record))

    def key_path(self, replica_id: str) -> Path:
        """Where the agent keeps the key the control plane sent for the replica."""
        return self.replicas / f"{safe_name(replica_id)}.key"

    def forget(self, replica_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.replicas / f"{safe_name(replica_id)}.json").unlink()
        self.key_path(replica_id).unlink(missing_ok=True)


def safe_name(replica_id: str) -> str:
    """A replica id as a file name (ids come from the control plane: no path in them)."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in replica_id).lstrip(".")


def write_private(path: Path, text: str) -> None:
    """Write `text` atomically to a file only its owner can read (mode 0600)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)  # a leftover would keep its own mode
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")
    tmp.replace(path)


def _write(path: Path, data: object) -> None:
    """Write atomically (a crash leaves the old file or the new one, never half)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    tmp.replace(path)
