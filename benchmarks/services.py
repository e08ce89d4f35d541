"""The processes a benchmark run needs, each started, awaited until ready, and always stopped.

Every service prints one ready line with its URL on stdout (the simulated engine, the
gateway, the minimal proxy, the instant upstream all do); ``Service`` waits for it with a
deadline, then keeps draining stdout in a thread so a chatty child never blocks on a full
pipe. stderr goes to a temporary file whose tail is shown if the child fails to start.
Stopping sends SIGTERM, waits, then SIGKILL: nothing is left running.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from types import TracebackType

__all__ = ["BENCH_DIR", "Service", "ServiceError", "python"]

BENCH_DIR = Path(__file__).resolve().parent
_URL = re.compile(r"listening on (http://[\w.\[\]:-]+:(\d+))")


class ServiceError(RuntimeError):
    """A service exited or did not print its ready line in time."""


class Service:
    """A child process serving HTTP; ``url``/``port`` known once ``start`` returns."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        *,
        ready_timeout: float = 60.0,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = argv
        self.api_key = ""  # the bearer key clients present, when the service needs one
        self.url = ""
        self.port = 0
        self.lines: list[str] = []
        self._ready_timeout = ready_timeout
        self._cwd = cwd
        self._proc: subprocess.Popen[str] | None = None
        # Closed in stop(), which every path out of start() reaches.
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def start(self) -> Service:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self._proc = subprocess.Popen(
            self.argv,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            stdin=subprocess.DEVNULL,
            text=True,
            cwd=self._cwd,
            env=env,
        )
        found = threading.Event()
        threading.Thread(target=self._read, args=(found,), daemon=True).start()
        if not found.wait(self._ready_timeout) or not self.url:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(1.0)  # an exit code, if it is exiting anyway
            reason = self._tail()
            self.stop()
            raise ServiceError(f"{self.name} did not become ready: {reason}")
        return self

    def cpu_seconds(self) -> float:
        """User + system CPU time of the process and its descendants so far (Linux /proc)."""
        if self._proc is None:
            return 0.0
        return sum(_cpu_of(pid) for pid in _tree(self._proc.pid))

    def _read(self, found: threading.Event) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            if len(self.lines) < 200:
                self.lines.append(line.rstrip())
            match = _URL.search(line)
            if match and not self.url:
                self.url, self.port = match.group(1), int(match.group(2))
                found.set()
        found.set()  # stdout closed: the child is gone

    def _tail(self) -> str:
        self._stderr.seek(0)
        text = self._stderr.read()[-2000:]
        code = self._proc.poll() if self._proc else None
        return f"exit code {code}; stdout {self.lines[-5:]}; stderr: {text.strip()}"

    def stop(self, timeout: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout)
        self._stderr.close()

    def __enter__(self) -> Service:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _tree(pid: int) -> list[int]:
    pids: list[int] = []
    pending = [pid]
    while pending and len(pids) < 64:
        current = pending.pop()
        pids.append(current)
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{current}/task"):
                children = Path(f"/proc/{current}/task/{task}/children").read_text()
                pending.extend(int(child) for child in children.split())
    return pids


def _cpu_of(pid: int) -> float:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    # fields[11], fields[12]: utime, stime (fields 14 and 15 of proc(5), counted after ")")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def python(*args: str) -> list[str]:
    """argv running this interpreter (the project's venv when run from it)."""
    return [sys.executable, *args]
