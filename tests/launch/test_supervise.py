"""The supervisor on real processes: the simulated engine up to ready, killed and
restarted, drained before it stops; a process that keeps dying ends in crash_loop."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
from pathlib import Path

import aiohttp
import psutil
import pytest
from aiohttp import web
from tests.redis_server import free_port

from fairgate.launch import Profile, command
from fairgate.launch.command import Command
from fairgate.launch.supervise import Report, Supervisor

pytestmark = pytest.mark.slow


class States:
    def __init__(self) -> None:
        self.seen: list[Report] = []
        self.changed = asyncio.Event()

    def __call__(self, report: Report) -> None:
        self.seen.append(report)
        self.changed.set()

    def names(self) -> list[str]:
        return [r.state for r in self.seen]

    async def until(self, state: str, count: int = 1, timeout: float = 60) -> Report:
        async with asyncio.timeout(timeout):
            while sum(r.state == state for r in self.seen) < count:
                self.changed.clear()
                await self.changed.wait()
        return [r for r in self.seen if r.state == state][count - 1]


def sim_supervisor(states: States, **kwargs: object) -> tuple[Supervisor, int]:
    port = free_port()
    profile = Profile(engine="sim", model="sim", served_name="m", port=port, args=("--speed", "0"))
    return Supervisor(
        command(profile), f"http://127.0.0.1:{port}/health", on_state=states, **kwargs
    ), port  # type: ignore[arg-type]


async def healthy(port: int) -> bool:
    async with aiohttp.ClientSession() as session:
        try:
            async with session.get(f"http://127.0.0.1:{port}/health") as answer:
                return answer.status == 200
        except aiohttp.ClientError:
            return False


async def test_ready_only_once_healthy_then_killed_and_restarted() -> None:
    states = States()
    sup, port = sim_supervisor(states, backoff_base=0.05, backoff_cap=0.2)
    sup.start()
    await states.until("ready")
    assert states.names()[:3] == ["starting", "loading", "ready"]
    assert await healthy(port)
    first = sup.pid
    assert first is not None
    os.killpg(first, signal.SIGKILL)
    failed = await states.until("failed")
    assert failed.exit_code == -signal.SIGKILL
    await states.until("ready", count=2)
    assert sup.pid != first and sup.restarts == 1
    assert await healthy(port)
    await sup.stop(drain=1)
    assert states.names()[-2:] == ["draining", "stopped"]
    assert not await healthy(port)


async def test_drain_waits_for_in_flight_while_the_engine_serves() -> None:
    states = States()
    sup, _port = sim_supervisor(states)
    sup.start()
    await states.until("ready")
    polls: list[bool] = []
    pid = sup.pid
    assert pid is not None

    def in_flight() -> int:
        os.kill(pid, 0)  # raises if the engine were already gone
        polls.append(True)
        return 1 if len(polls) < 5 else 0

    await sup.stop(drain=30, in_flight=in_flight)
    assert len(polls) == 5
    assert states.names()[-2:] == ["draining", "stopped"]


async def test_a_process_that_keeps_dying_ends_in_crash_loop_with_its_output() -> None:
    states = States()
    dying = Command(
        argv=(
            sys.executable,
            "-c",
            "print('loading weights'); print('CUDA out of memory'); exit(3)",
        )
    )
    sup = Supervisor(
        dying,
        "http://127.0.0.1:9/health",
        on_state=states,
        backoff_base=0.01,
        backoff_cap=0.05,
        max_restarts=2,
    )
    sup.start()
    report = await states.until("crash_loop")
    assert report.exit_code == 3 and report.restarts == 2
    assert report.tail[-2:] == ("loading weights", "CUDA out of memory")
    assert states.names().count("starting") == 3
    await asyncio.sleep(0.3)
    assert states.names()[-1] == "crash_loop"  # no more restarts until an operator acts
    sup.reset()
    await states.until("crash_loop", count=2)
    await sup.stop()


def test_backoff_grows_with_jitter_under_the_cap() -> None:
    sup = Supervisor(
        Command(argv=("true",)),
        "http://127.0.0.1:9/",
        backoff_base=1,
        backoff_cap=60,
        rng=random.Random(7),
    )
    for failures, ceiling in [(1, 1), (2, 2), (3, 4), (6, 32), (7, 60), (30, 60)]:
        delays = [sup.backoff(failures) for _ in range(50)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(set(delays)) > 1


_WAIT_THEN_EXEC = """
import os, sys, time
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
os.execv(sys.argv[2], sys.argv[2:])
"""


async def test_another_process_answering_on_the_port_is_not_the_engine_ready(
    tmp_path: Path,
) -> None:
    """While the engine loads (it has not bound its port yet), any process on the node
    can bind that port and answer /health. That is not the replica being ready: the
    gateway would send it the tenants' prompts and the engine's key."""
    port = free_port()
    hits = 0
    asked_three_times = asyncio.Event()

    async def health(request: web.Request) -> web.Response:
        nonlocal hits
        hits += 1
        if hits >= 3:
            asked_three_times.set()
        return web.Response(text="ok")

    decoy = web.Application()
    decoy.router.add_get("/health", health)
    runner = web.AppRunner(decoy)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()

    go = tmp_path / "go"
    sim = command(
        Profile(engine="sim", model="sim", served_name="m", port=port, args=("--speed", "0"))
    )
    loading = Command(argv=(sys.executable, "-c", _WAIT_THEN_EXEC, str(go), *sim.argv))
    states = States()
    sup = Supervisor(
        loading, f"http://127.0.0.1:{port}/health", on_state=states, health_interval=0.05
    )
    sup.start()
    try:
        ready = asyncio.create_task(states.until("ready"))
        async with asyncio.timeout(60):
            await asyncio.wait(
                {ready, asyncio.create_task(asked_three_times.wait())},
                return_when=asyncio.FIRST_COMPLETED,
            )
        assert "ready" not in states.names(), "the decoy's /health made the replica ready"
        assert states.names() == ["starting", "loading"]

        # The decoy goes, the engine finishes loading and binds its port: ready.
        await runner.cleanup()
        go.touch()
        await ready
        assert await healthy(port)
        pid = sup.pid
        assert pid is not None
        listening = {
            c.laddr.port
            for c in psutil.Process(pid).net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN
        }
        assert port in listening
    finally:
        await runner.cleanup()
        await sup.stop(drain=0)
