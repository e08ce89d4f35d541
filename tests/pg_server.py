"""A PostgreSQL server of a test's own, on a free port, in a fresh data directory.

Tests that stop or restart PostgreSQL use one of these, never the shared server:
``initdb`` and ``pg_ctl`` from the Debian packages (``/usr/lib/postgresql/*/bin``),
trust authentication on 127.0.0.1 only. PostgreSQL refuses to run as root, so
as root the binaries run as the ``postgres`` user. Under CI=true missing binaries
fail the test instead of skipping it.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from tests.redis_server import free_port

__all__ = ["PostgresProcess", "private_postgres_server"]


def _bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(found[-1]).parent if found else None


class PostgresProcess:
    """One PostgreSQL cluster on 127.0.0.1:``port``; ``url`` names its ``postgres`` database."""

    def __init__(self, bin_dir: Path) -> None:
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._bin = bin_dir
        self._root = Path(tempfile.mkdtemp(prefix="fairgate-pg-"))
        self.data = self._root / "data"
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            shutil.chown(self._root, "postgres", "postgres")

    def _run(self, tool: str, *args: str) -> None:
        argv = [str(self._bin / tool), *args]
        if self._as_postgres:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-N")

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self._root} -c fsync=off"
        log = str(self._root / "server.log")
        self._run(
            "pg_ctl", "-D", str(self.data), "-o", options, "-l", log, "-w", "-t", "30", "start"
        )

    def stop(self) -> None:
        """A fast shutdown: sessions are cut, as when an operator restarts the server."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "30", "stop")

    def remove(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):  # not running
            self.stop()
        shutil.rmtree(self._root, ignore_errors=True)


@contextmanager
def private_postgres_server() -> Iterator[PostgresProcess]:
    """A started :class:`PostgresProcess`, removed on exit (skipped, or failed under CI=true,
    when the PostgreSQL server binaries are not installed)."""
    bin_dir = _bin_dir()
    if bin_dir is None:
        reason = "the PostgreSQL server binaries (initdb, pg_ctl) are not installed"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason} (CI=true: services are required, not optional)")
        pytest.skip(reason)
    server = PostgresProcess(bin_dir)
    try:
        server.init()
        server.start()
        yield server
    finally:
        server.remove()
