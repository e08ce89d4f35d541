"""A redis-server of a test's own, on a free port, without persistence.

Tests that stop, restart or reconfigure Redis (a password, MONITOR) use one of
these, never the shared server. Under CI=true a missing ``redis-server`` fails
the test instead of skipping it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pytest
from redis import Redis

__all__ = ["RedisProcess", "free_port", "private_redis_server"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class RedisProcess:
    """One redis-server on 127.0.0.1:``port``, to start and stop at will; ``password``
    sets ``requirepass``; ``directory`` is its working directory; ``extra`` are more
    command-line options (``--replicaof HOST PORT``)."""

    def __init__(
        self,
        *,
        password: str | None = None,
        directory: str | None = None,
        extra: Sequence[str] = (),
    ) -> None:
        self.port = free_port()
        self._extra = tuple(extra)
        self.password = password
        auth = f":{password}@" if password else ""
        self.url = f"redis://{auth}127.0.0.1:{self.port}/0"
        self._directory = directory
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
        args += ["--save", "", "--appendonly", "no"]
        if self.password:
            args += ["--requirepass", self.password]
        if self._directory:
            args += ["--dir", self._directory]
        args += self._extra
        self._process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        client = Redis(
            port=self.port, password=self.password, socket_timeout=1, socket_connect_timeout=1
        )
        try:
            while time.monotonic() < deadline:
                try:
                    if client.ping():
                        return
                except Exception:
                    time.sleep(0.05)
        finally:
            client.close()
        self.stop()
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait(timeout=10)
            self._process = None


@contextmanager
def private_redis_server(
    *, password: str | None = None, directory: str | None = None
) -> Iterator[RedisProcess]:
    """A started :class:`RedisProcess`, stopped on exit (skipped, or failed under CI=true,
    when redis-server is not installed)."""
    if shutil.which("redis-server") is None:
        reason = "redis-server is not installed"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason} (CI=true: services are required, not optional)")
        pytest.skip(reason)
    server = RedisProcess(password=password, directory=directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()
