"""A redis-server of a test's own, on a free port, without persistence.

Tests that stop, restart or reconfigure Redis (a password, MONITOR) use one of
these, never the shared server. Under CI=true a missing ``redis-server`` fails
the test instead of skipping it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

__all__ = ["RedisProcess", "free_port", "port_block", "private_redis_server", "scripts_waiting"]


async def scripts_waiting(client: AsyncRedis, count: int) -> None:
    """Return once ``count`` clients are blocked on the server (scripts held by a
    ``CLIENT PAUSE``); fail after ~3 s."""
    for _ in range(300):
        if (await client.info("clients"))["blocked_clients"] >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{count} scripts never reached the server")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def port_block(width: int) -> int:
    """The first of ``width`` consecutive ports for a process to listen on that it is told
    of in advance (a fleet's engine ports), drawn below the kernel's ephemeral range: in
    it, any client socket of the run and every ``free_port`` may hold one of them (seen
    in a whole run: an agent refused a replica whose port an outgoing connection held)."""
    low = 32768
    with contextlib.suppress(OSError, ValueError, IndexError):
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    return random.randrange(10000, max(10000 + width, min(low, 32768) - width), width)


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
    *, password: str | None = None, directory: str | None = None, extra: Sequence[str] = ()
) -> Iterator[RedisProcess]:
    """A started :class:`RedisProcess` (``extra``: more redis-server options), stopped on
    exit (skipped, or failed under CI=true, when redis-server is not installed)."""
    if shutil.which("redis-server") is None:
        reason = "redis-server is not installed"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason} (CI=true: services are required, not optional)")
        pytest.skip(reason)
    server = RedisProcess(password=password, directory=directory, extra=extra)
    server.start()
    try:
        yield server
    finally:
        server.stop()
