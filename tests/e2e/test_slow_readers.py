"""Each stream buffers a bounded number of bytes toward its client; a client that falls
further behind is disconnected and its upstream cancelled, so memory stays bounded
whatever the clients do.

The clients here announce a 1400-byte MSS and a 4 KiB receive buffer, like a
client on a real network: on loopback the kernel would otherwise queue
megabytes per connection before the gateway ever saw a full buffer.
"""

from __future__ import annotations

import resource
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from tests.e2e.conftest import model, write_config
from tests.e2e.robust_wire import (
    chat_body,
    connect,
    get,
    holds_connection_from,
    open_fds,
    post,
    samples,
    stderr_into,
    until,
    vm_rss_kib,
)

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess

pytestmark = pytest.mark.slow

READERS = 200
BUFFER = 64 * 1024  # limits.stream_buffer_bytes
CUT_AFTER = 3.0  # limits.slow_reader_timeout, seconds
# 1000 tokens/s per sequence, and KV cache enough for every reader's whole answer.
FAST_ENGINE = ("--model", "m", "--speed", "1000", "--ttft", "0", "--kv-blocks", "200000")
MAX_TOKENS = 20_000  # 20 s at 1000 tokens/s: only a cancellation ends it within the test
# The gateway's resident memory may grow this much while 200 clients stop reading.
# Measured: 50-110 MiB (per stream: the buffer toward the client, the upstream's read
# buffers, allocator slack). A gateway that buffered whole streams would need gigabytes.
RSS_BOUND_KIB = 200 * 1024


@dataclass(frozen=True, slots=True)
class Env:
    sim: SimProcess
    gateway: GatewayProcess
    log: Path  # the gateway's stderr

    def running(self) -> float:
        return samples(self.sim.metrics(), "vllm:num_requests_running")

    def aborts(self) -> dict[str, float]:
        status, body = get(self.gateway.admin_url + "/metrics")
        assert status == 200
        text = body.decode()
        return {
            reason: samples(text, "fairgate_stream_aborts_total", reason=reason)
            for reason in ("client_fell_behind", "client_disconnected")
        }


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 4 * READERS + 256  # clients here; clients and upstreams in the gateway
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))
    with ExitStack() as stack:
        sim = stack.enter_context(SimProcess(*FAST_ENGINE))
        directory = tmp_path_factory.mktemp("gw")
        config = write_config(
            directory,
            [model("m", sim)],
            limits={"stream_buffer_bytes": BUFFER, "slow_reader_timeout": f"{CUT_AFTER}s"},
            # An engine busy with 200 fast streams answers its health check late; that
            # must not take it out of routing halfway through sending the requests.
            health={"interval": "10s", "timeout": "10s"},
        )
        log = directory / "gateway.log"
        with stderr_into(log):
            gateway = stack.enter_context(GatewayProcess(config))
        yield Env(sim, gateway, log)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def stream_request(env: Env) -> socket.socket:
    sock = connect(env.gateway.host, env.gateway.port, rcvbuf=4096, mss=1400)
    post(sock, "/v1/chat/completions", chat_body(stream=True, max_tokens=MAX_TOKENS))
    return sock


def plain_request_succeeds(env: Env) -> bool:
    sock = connect(env.gateway.host, env.gateway.port)
    try:
        post(sock, "/v1/chat/completions", chat_body(stream=False, max_tokens=2))
        head = sock.recv(65536)
    finally:
        sock.close()
    return head.startswith(b"HTTP/1.1 200")


def test_readers_that_never_read_are_cut_off_and_memory_stays_bounded(env: Env) -> None:
    assert plain_request_succeeds(env)
    env.sim.reset()
    pid = env.gateway.pid
    assert pid is not None
    rss_before, fds_before = vm_rss_kib(pid), open_fds(pid)
    rss_peak = rss_before
    clients: list[socket.socket] = []
    try:
        for _ in range(READERS):
            clients.append(stream_request(env))
        started = time.monotonic()

        seen: dict[str, float] = {}

        def all_cancelled() -> bool:
            nonlocal rss_peak
            rss_peak = max(rss_peak, vm_rss_kib(pid))
            stats = env.sim.stats()
            seen.update(
                received=stats["received"],
                aborted=stats["aborted"],
                finished=stats["finished"],
                running=env.running(),
                fds=open_fds(pid),
            )
            return seen["aborted"] == READERS and seen["running"] == 0

        try:
            until(all_cancelled, 90, f"all {READERS} upstream requests cancelled", interval=0.5)
        except AssertionError as failed:
            raise AssertionError(f"{failed}; engine and gateway: {seen}") from None
        elapsed = time.monotonic() - started
        # The clients still hold their sockets open: the gateway let go of its ends.
        until(lambda: open_fds(pid) <= fds_before + 2, 30, "the gateway closed the connections")
        rss_after = vm_rss_kib(pid)
        print(
            f"\n{READERS} readers that never read: all cut off after {elapsed:.1f}s; gateway "
            f"RSS {rss_before} KiB before, {rss_peak} KiB peak, {rss_after} KiB after"
        )
        assert rss_peak - rss_before < RSS_BOUND_KIB
        assert rss_after - rss_before < RSS_BOUND_KIB
        assert env.sim.stats()["finished"] == 0
        assert sum(env.aborts().values()) >= READERS
        assert plain_request_succeeds(env)
    finally:
        for sock in clients:
            sock.close()


def test_a_reader_that_falls_behind_is_reset_and_its_upstream_cancelled(env: Env) -> None:
    env.sim.reset()
    behind_before = env.aborts()["client_fell_behind"]
    sock = stream_request(env)
    received, ended = b"", ""
    deadline = time.monotonic() + 60
    try:
        # Takes what its 4 KiB buffer holds twice a second: it keeps reading, but far
        # slower than the engine writes, so the gateway's buffer toward it stays full.
        while not ended and time.monotonic() < deadline:
            time.sleep(0.5)
            sock.settimeout(0.5)
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except ConnectionResetError:
                ended = "reset"
                continue
            if not chunk:
                ended = "eof"
            received += chunk
    finally:
        sock.close()
    assert received.startswith(b"HTTP/1.1 200")
    assert ended == "reset", f"the stream was not cut off within 60s ({len(received)} bytes)"
    assert b"data: [DONE]" not in received
    until(
        lambda: env.sim.stats()["aborted"] == 1 and env.running() == 0,
        15,
        "the upstream request cancelled",
    )
    # This request's own line, found by its id: the first test's 200 streams log the
    # same words, and one of them settling late would also move the counter.
    request_id = _header(received, b"x-request-id")
    ended_line = until(
        lambda: _logged_end(env.log, request_id),
        10,
        f"the gateway logging how request {request_id} ended",
    )
    assert "ended slow_reader (client_fell_behind)" in ended_line, ended_line
    assert env.aborts()["client_fell_behind"] >= behind_before + 1
    assert " ERROR " not in env.log.read_text()  # a cut-off client is expected, not a fault


def _header(response: bytes, name: bytes) -> str:
    head = response.split(b"\r\n\r\n", 1)[0]
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip().decode()
    raise AssertionError(f"no {name.decode()} in the answer's head: {head!r}")


def _logged_end(log: Path, request_id: str) -> str | None:
    for line in log.read_text().splitlines():
        if f"request {request_id} " in line and " ended " in line:
            return line
    return None


def test_a_client_that_never_reads_a_whole_answer_does_not_keep_its_connection(env: Env) -> None:
    pid = env.gateway.pid
    assert pid is not None
    sock = connect(env.gateway.host, env.gateway.port, rcvbuf=4096, mss=1400)
    try:
        # About 200 KiB of embeddings, written whole at once: the gateway's part ends
        # at once, and only the connection is left waiting for a reader that never comes.
        post(sock, "/v1/embeddings", orjson.dumps({"model": "m", "input": ["hello"] * 40}))
        sock.settimeout(15)
        assert sock.recv(15, socket.MSG_PEEK) == b"HTTP/1.1 200 OK"  # peeked, not read
        assert holds_connection_from(pid, sock)
        # Reset by the kernel once nothing was taken for twice slow_reader_timeout.
        until(
            lambda: not holds_connection_from(pid, sock),
            4 * CUT_AFTER + 15,
            "the gateway let go of the connection",
        )
    finally:
        sock.close()
