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
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = [
    "BENCH_DIR",
    "Group",
    "RedisServer",
    "Remote",
    "Service",
    "ServiceError",
    "free_port",
    "python",
]

BENCH_DIR = Path(__file__).resolve().parent
_URL = re.compile(r"listening on (http://[\w.\[\]:-]+:(\d+))")
_ADMIN = re.compile(r" admin (https?://[\w.\[\]:-]+:\d+)")


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
        self.admin_url = ""  # the gateway's admin listener, from its ready line
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
        if "PYTHONPATH" in env:  # the child runs in its own directory: keep the same tree
            paths = env["PYTHONPATH"].split(os.pathsep)
            env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(path) for path in paths if path)
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

    def cpu_by_process(self) -> dict[int, float]:
        """CPU time so far of each process of the tree (the workers of a gateway)."""
        if self._proc is None:
            return {}
        return {pid: _cpu_of(pid) for pid in _tree(self._proc.pid)}

    def _read(self, found: threading.Event) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            if len(self.lines) < 200:
                self.lines.append(line.rstrip())
            match = _URL.search(line)
            if match and not self.url:
                self.url, self.port = match.group(1), int(match.group(2))
                admin = _ADMIN.search(line)
                self.admin_url = admin.group(1) if admin else ""
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


class Remote:
    """A server this run did not start (``--compare``): an address, no process to read."""

    def __init__(self, name: str, url: str) -> None:
        self.name = name
        self.url = url
        self.api_key = ""

    def cpu_seconds(self) -> float:
        return 0.0


class Group:
    """Several processes measured as one (the gateway's two upstream replicas)."""

    def __init__(self, members: list[Service]) -> None:
        self.members = members
        self.url = members[0].url

    def cpu_seconds(self) -> float:
        return sum(member.cpu_seconds() for member in self.members)


class RedisServer:
    """A private ``redis-server`` on a free loopback port: no persistence, stopped at the end.

    The benchmark never touches a Redis it did not start (nor the shared 6379)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        argv = ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port)]
        argv += ["--save", "", "--appendonly", "no", "--protected-mode", "yes"]
        self._argv = argv
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def start(self) -> RedisServer:
        import redis  # the gateway's own dependency

        if shutil.which("redis-server") is None:
            raise ServiceError("redis-server is not installed (the Redis leg needs it)")
        self._proc = subprocess.Popen(
            self._argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1.0)
        deadline = time.monotonic() + 20.0
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.RedisError):
                if client.ping():
                    client.close()
                    return self
            if self._proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise ServiceError(f"redis-server on port {self.port} did not become ready")

    def cpu_seconds(self) -> float:
        return _cpu_of(self._proc.pid) if self._proc is not None else 0.0

    def client(self) -> Any:
        """A (synchronous) redis-py client of this server."""
        import redis  # the gateway's own dependency

        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5.0)

    def stop(self, timeout: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def free_port(host: str = "127.0.0.1") -> int:
    """A port free right now (the kernel's choice); the caller binds it at once."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


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
