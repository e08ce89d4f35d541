"""A Redis primary, one replica and a Redis Sentinel watching them, all of a test's own.

    with sentinel_group(tmp_path) as group:
        group.sentinel_address        "127.0.0.1:<port>" for state.sentinels
        group.primary_port()          the port the Sentinel names as primary now
        group.kill_primary()          SIGKILL the primary; the Sentinel promotes the replica

From the Debian ``redis-server`` and ``redis-sentinel`` binaries, on free loopback
ports, without persistence. The Sentinel holds a primary down after 1 s without an
answer (``down-after-milliseconds``) and, being the only one, fails over at once
(quorum 1). Under CI=true a missing binary fails the test instead of skipping it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from redis import Redis
from tests.redis_server import RedisProcess, free_port

__all__ = ["SERVICE", "SentinelGroup", "sentinel_group"]

SERVICE = "fairgate-test"
DOWN_AFTER_MS = 1000


class SentinelGroup:
    """Two redis-servers (the first the primary) and a redis-sentinel watching them."""

    def __init__(self, directory: Path) -> None:
        self.servers: dict[int, RedisProcess] = {}
        primary = RedisProcess(directory=str(directory))
        self.servers[primary.port] = primary
        replica = RedisProcess(
            directory=str(directory), extra=["--replicaof", "127.0.0.1", str(primary.port)]
        )
        self.servers[replica.port] = replica
        self.sentinel_port = free_port()
        self.sentinel_address = f"127.0.0.1:{self.sentinel_port}"
        self._config = directory / "sentinel.conf"
        self._config.write_text(
            f"port {self.sentinel_port}\n"
            "bind 127.0.0.1\n"
            f"dir {directory}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {primary.port} 1\n"
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {SERVICE} 10000\n"
            f"sentinel parallel-syncs {SERVICE} 1\n"
        )
        self._sentinel: subprocess.Popen[bytes] | None = None
        self._first_primary = primary.port

    def start(self) -> None:
        for server in self.servers.values():
            server.start()
        self._sentinel = subprocess.Popen(
            ["redis-sentinel", str(self._config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        # ready when the Sentinel names the primary and knows its replica (it can fail over)
        self._until(lambda: self.primary_port() == self._first_primary, "the Sentinel names it")
        self._until(lambda: self._replicas() == 1, "the Sentinel sees the replica")
        self._until(self._replica_in_sync, "the replica is in sync")

    def stop(self) -> None:
        if self._sentinel is not None:
            self._sentinel.kill()
            self._sentinel.wait(timeout=10)
            self._sentinel = None
        for server in self.servers.values():
            server.stop()

    def primary_port(self) -> int | None:
        """The primary's port, as the Sentinel says now (None: it cannot say)."""
        try:
            with self._ask() as sentinel:
                found = sentinel.sentinel_get_master_addr_by_name(SERVICE)
        except Exception:
            return None
        return None if not found else int(found[1])

    def client(self, port: int) -> Redis:
        return Redis(port=port, socket_timeout=2, socket_connect_timeout=2)

    def kill_primary(self) -> int:
        """SIGKILL the current primary; returns its port."""
        port = self.primary_port()
        assert port is not None
        self.servers[port].stop()
        return port

    def wait_for_new_primary(self, old: int, timeout: float = 30.0) -> int:
        """Wait until the Sentinel names a primary other than ``old``; its port."""
        self._until(lambda: self.primary_port() not in (None, old), "a new primary", timeout)
        port = self.primary_port()
        assert port is not None
        return port

    def failover(self) -> int:
        """A planned failover (``SENTINEL FAILOVER``): the replica is promoted and the old
        primary, alive, becomes its replica; returns the new primary's port."""
        old = self.primary_port()
        assert old is not None
        with self._ask() as sentinel:
            sentinel.execute_command("SENTINEL FAILOVER", SERVICE)
        return self.wait_for_new_primary(old)

    def wait_until_replica(self, port: int, timeout: float = 30.0) -> None:
        """Wait until the server on ``port`` reports itself a replica (a demoted primary)."""

        def demoted() -> bool:
            with self.client(port) as server:
                return bool(server.info("replication")["role"] == "slave")

        self._until(demoted, f"the server on {port} is a replica", timeout)

    def _replicas(self) -> int:
        try:
            with self._ask() as sentinel:
                replicas = sentinel.sentinel_slaves(SERVICE)
        except Exception:
            return 0
        # one the Sentinel would promote: connected, not down, its link to the primary up
        return sum(
            1
            for r in replicas
            if not (r["is_disconnected"] or r["is_sdown"] or r["is_odown"])
            and r.get("master-link-status") == "ok"
        )

    def _replica_in_sync(self) -> bool:
        with self.client(self._first_primary) as primary:
            info = primary.info("replication")
        return int(info.get("connected_slaves", 0)) == 1 and "slave0" in info

    def _ask(self) -> Redis:
        return Redis(port=self.sentinel_port, socket_timeout=1, socket_connect_timeout=1)

    @staticmethod
    def _until(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(0.1)
        raise RuntimeError(f"Sentinel group: not ready in {timeout:.0f} s: {what}")


@contextmanager
def sentinel_group(directory: Path) -> Iterator[SentinelGroup]:
    """A started :class:`SentinelGroup`, stopped on exit (skipped, or failed under CI=true,
    when the Redis binaries are not installed)."""
    missing = [name for name in ("redis-server", "redis-sentinel") if shutil.which(name) is None]
    if missing:
        reason = f"{' and '.join(missing)} not installed (Debian: apt-get install redis-sentinel)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason} (CI=true: services are required, not optional)")
        pytest.skip(reason)
    group = SentinelGroup(directory)
    try:
        group.start()
        yield group
    finally:
        group.stop()
