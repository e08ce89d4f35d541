"""Launching servers as child processes: the ready line, stopping, failures."""

from __future__ import annotations

import sys
import time

import httpx
import pytest

from fairgate.sim.process import ServerProcess, SimProcess

pytestmark = pytest.mark.slow

_ANNOUNCE = (
    "import os, sys, time\n"
    "print('starting up', flush=True)\n"
    "print('READY http://127.0.0.1:' + os.environ['FAKE_PORT'], flush=True)\n"
    "for i in range(100000): print('chatter', i)\n"
    "time.sleep(60)\n"
)


def test_sim_process_reports_its_port_and_stops_cleanly() -> None:
    sim = SimProcess("--speed", "0")
    with sim:
        assert sim.url == f"http://127.0.0.1:{sim.port}"
        assert sim.port > 0 and sim.host == "127.0.0.1"
        assert httpx.get(sim.url + "/health").status_code == 200
        assert sim.stats()["received"] == 0
    # SIGTERM is a clean stop: exit status 0, not a signal death
    assert sim.stop() == 0
    with pytest.raises(httpx.ConnectError):
        httpx.get(sim.url + "/health")


async def test_sim_process_as_an_async_context_manager() -> None:
    async with SimProcess("--speed", "0") as sim, httpx.AsyncClient() as client:
        answer = await client.get(sim.url + "/v1/models")
        assert answer.json()["data"][0]["id"] == "sim-model"
    assert sim.stop() == 0


def test_a_bad_flag_fails_fast_with_the_exit_status() -> None:
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="exited with status 2"):
        SimProcess("--scheduling-policy", "lottery").start()
    assert time.monotonic() - started < 15


def test_generic_server_process_passes_env_and_drains_stdout() -> None:
    argv = [sys.executable, "-c", _ANNOUNCE]
    with ServerProcess(argv, "READY ", env={"FAKE_PORT": "4321"}) as server:
        assert server.url == "http://127.0.0.1:4321" and server.port == 4321
        time.sleep(0.5)  # the child writes far more than a pipe holds; it must not block
        assert server.pid is not None
    assert server.stop() is not None


def test_a_silent_child_times_out_and_is_killed() -> None:
    server = ServerProcess([sys.executable, "-c", "import time; time.sleep(60)"], "READY ")
    server.startup_timeout = 1.0
    with pytest.raises(RuntimeError, match="no ready line"):
        server.start()
    assert server.stop() is not None  # already stopped: stop is idempotent


def test_sigterm_ends_open_streams_and_exits_zero() -> None:
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 500, "stream": True}
    sim = SimProcess("--speed", "5", "--ttft", "0").start()
    try:
        with (
            httpx.Client(base_url=sim.url, timeout=30) as http,
            http.stream("POST", "/v1/chat/completions", json=body) as stream,
        ):
            lines = stream.iter_lines()
            assert next(lines).startswith("data: ")
            started = time.monotonic()
            assert sim.stop() == 0
            rest = list(lines)  # ends cleanly, without the [DONE] of a finished stream
        assert time.monotonic() - started < 8
        assert "data: [DONE]" not in rest
    finally:
        sim.stop()
