"""Starting a server as a child process and waiting until it listens (tests, the demo, benchmarks).

``ServerProcess`` is the generic part: it runs ``argv``, waits for one stdout
line starting with ``ready_prefix`` and followed by the URL, and stops the child
with SIGTERM (then SIGKILL after ``stop_timeout``). ``SimProcess`` runs
``fairgate sim`` on a free loopback port and adds calls to its control endpoints:

    with SimProcess("--speed", "0") as sim:
        client = openai.OpenAI(base_url=sim.url + "/v1", api_key="x")
        ...
        assert sim.stats()["finished"] == 1

Both are sync and async context managers (the async form runs start and stop in
a thread). The child's stderr is inherited, or appended to the file ``stderr``
names; its stdout is drained after the ready line so a chatty child can never
block on a full pipe.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

import orjson

from fairgate.sim.server import READY_PREFIX

__all__ = ["ServerProcess", "SimProcess"]


class ServerProcess:
    """A child server process that announces ``<ready_prefix><url>`` on stdout once listening.

    ``env`` adds to (and overrides) the parent's environment. ``start`` raises
    ``RuntimeError`` if the child exits or stays silent past ``startup_timeout``
    seconds (the child is killed then). ``stop`` is idempotent and returns the
    exit status.
    """

    def __init__(
        self,
        argv: Sequence[str],
        ready_prefix: str,
        *,
        env: Mapping[str, str] | None = None,
        startup_timeout: float = 20.0,
        stop_timeout: float = 10.0,
        stderr: Path | None = None,
    ) -> None:
        self.argv = list(argv)
        self.stderr = stderr
        self.ready_prefix = ready_prefix
        self.env = dict(env) if env else None
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.url = ""
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def port(self) -> int:
        port = urllib.parse.urlsplit(self.url).port
        if port is None:
            raise RuntimeError("the server is not started")
        return port

    @property
    def host(self) -> str:
        return urllib.parse.urlsplit(self.url).hostname or ""

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self) -> Self:
        env = {**os.environ, **self.env} if self.env else None
        with contextlib.ExitStack() as files:
            err = None if self.stderr is None else files.enter_context(self.stderr.open("ab"))
            proc = subprocess.Popen(  # noqa: S603 - argv comes from the caller, not a shell
                self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, env=env
            )
        self._proc = proc
        lines: queue.Queue[bytes] = queue.Queue()
        assert proc.stdout is not None
        threading.Thread(target=_drain, args=(proc.stdout, lines), daemon=True).start()
        try:
            self.url = self._await_ready(proc, lines)
        except BaseException:
            self.stop()
            raise
        return self

    def _await_ready(self, proc: subprocess.Popen[bytes], lines: queue.Queue[bytes]) -> str:
        deadline = time.monotonic() + self.startup_timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = lines.get(timeout=min(left, 0.1)).decode(errors="replace").strip()
            except queue.Empty:
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"{self.argv[0]} exited with status {proc.returncode} before listening"
                    ) from None
                continue
            if line.startswith(self.ready_prefix):
                return line[len(self.ready_prefix) :].strip()
        raise RuntimeError(f"no ready line within {self.startup_timeout:g}s from {self.argv!r}")

    def stop(self) -> int | None:
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return proc.returncode

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)


class SimProcess(ServerProcess):
    """``fairgate sim --port 0 --host 127.0.0.1 *args`` as a child, with control calls."""

    def __init__(
        self, *args: str, env: Mapping[str, str] | None = None, startup_timeout: float = 20.0
    ) -> None:
        argv = [sys.executable, "-m", "fairgate", "sim", "--port", "0", "--host", "127.0.0.1"]
        super().__init__(
            [*argv, *args],
            READY_PREFIX,
            env=env,
            startup_timeout=startup_timeout,
        )

    def requests(self, path: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """``GET /sim/requests``: what the simulator received, newest last."""
        query = {k: v for k, v in (("path", path), ("limit", limit)) if v is not None}
        suffix = "?" + urllib.parse.urlencode(query) if query else ""
        result: list[dict[str, Any]] = self._call("GET", "/sim/requests" + suffix)
        return result

    def stats(self) -> dict[str, Any]:
        """``GET /sim/stats``."""
        result: dict[str, Any] = self._call("GET", "/sim/stats")
        return result

    def batch(self) -> dict[str, Any]:
        """``GET /sim/batch``: the running sequences (request id, priority), waiting, KV usage."""
        result: dict[str, Any] = self._call("GET", "/sim/batch")
        return result

    def faults(self, **spec: Any) -> dict[str, Any]:
        """``POST /sim/faults`` with ``spec`` (e.g. ``fail_next=2, fail_status=503``)."""
        result: dict[str, Any] = self._call("POST", "/sim/faults", spec)
        return result

    def reset(self) -> None:
        """``POST /sim/reset``: clear the record, counters, faults and prefix cache."""
        self._call("POST", "/sim/reset")

    def metrics(self) -> str:
        """``GET /metrics`` as text (needs no key under the vLLM personality)."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=30) as response:  # noqa: S310
            body: bytes = response.read()
        return body.decode()

    def _call(self, method: str, path: str, body: object = None) -> Any:
        data = orjson.dumps(body) if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method)  # noqa: S310
        if data is not None:
            request.add_header("content-type", "application/json")
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            return orjson.loads(response.read())


def _drain(stream: IO[bytes], lines: queue.Queue[bytes]) -> None:
    for line in stream:
        lines.put(line)
    stream.close()
