"""Redis round trips per request on the full path, counted by Redis itself (MONITOR).

A real gateway on the Redis state back end (a redis-server of this test's own, on
a free port) with everything on: a key with requests and tokens per minute,
requests per day and in-flight limits that never bind, its team's totals, three
budgets (team, one with a soft limit; key; tag), a pool with fair share and
admission bands, two replicas (two simulated engines). Requests go one at a
time; MONITOR, on a connection of its own, lists every command Redis runs, with
the client that sent it. A Lua script (EVALSHA) is one round trip; the commands
it runs inside Redis are not counted (MONITOR marks them ``lua``).

What each path costs, as measured here:

- **plain** (within its organisation's reservation): one EVALSHA on the way in
  (limits, budgets and the fair-share claim in one script) and one on the way out
  (the limits and budgets corrected, the slot released, the usage charged);
- **borrower** (an organisation whose reservation is 0, pool not full): the same
  one script in (the claim rides along and borrows), plus one read of the pool's
  decayed usage to rank it, at most ten times a second per pool and gateway (cached:
  ``proxy.admit.USAGE_TTL``); one script out;
- **refused** (a limit binds): one script in, which charges and claims nothing,
  and nothing on the way out.

Not measured here, from the code: a borrower that waits (in the admission queue,
or held by the dispatcher in a full pool) is claimed after its wait, so its way
in is two round trips (the limits, then the claim); its way out is still one.
A request that finds its band full after the claim rode along gives the slot
back at once (one more round trip) and is claimed again after its wait.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from tests.e2e.conftest import StartGateway, StartSim, model
from tests.redis_server import private_redis_server

from fairgate.config import load_config
from fairgate.core.money import Money
from fairgate.server.process import GatewayProcess
from fairgate.tenancy import open_tenancy
from fairgate.tenancy.actor import Actor
from fairgate.tenancy.limits import Limits

pytestmark = [pytest.mark.redis, pytest.mark.timeout(180)]

BIG = 1_000_000_000  # limits far above what a test sends: they never bind
PAUSE = 0.3  # after each answer, so that its settle is in its own window


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[int]:
    """A redis-server of this test's own: nothing else talks to it."""
    with private_redis_server(directory=str(tmp_path)) as server:
        yield server.port


def _sha(script: str) -> str:
    """The SHA1 Redis knows one of the state's single-file scripts by."""
    text = resources.files("fairgate.state").joinpath(f"lua/{script}.lua").read_text("utf-8")
    return hashlib.sha1(text.encode()).hexdigest()


class Monitor:
    """Every command Redis runs from now on: (time, client, name, first argument, lua)."""

    def __init__(self, port: int) -> None:
        self._client = redis.Redis(port=port)
        self._monitor = self._client.monitor()
        self._monitor.__enter__()
        self.seen: list[tuple[float, str, str, str, bool]] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while True:
                c = self._monitor.next_command()
                words = str(c["command"]).split(" ")
                entry = (
                    float(c["time"]),
                    str(c.get("client_address", "")) + ":" + str(c.get("client_port", "")),
                    words[0].upper(),
                    words[1] if len(words) > 1 else "",
                    c.get("client_type") == "lua",
                )
                with self._lock:
                    self.seen.append(entry)
        except (redis.RedisError, OSError, ValueError):
            return

    def between(self, start: float, end: float) -> list[tuple[float, str, str, str, bool]]:
        """Commands sent by clients (not run by a script) in [start, end)."""
        with self._lock:
            sent = [e for e in self.seen if start <= e[0] < end and not e[4]]
        # The fair-share gauges' reading (every health interval, not per request) is a
        # script then HGETALLs of the pool's usage: left out, as is any usage read.
        drop = set()
        for i, e in enumerate(sent):
            if e[2] == "HGETALL":
                drop.add(i)
        gauges = _sha("in_flight")
        drop |= {i for i, e in enumerate(sent) if e[2] == "EVALSHA" and e[3] == gauges}
        # So is the fair-share board (state/board.py): each gateway publishes its
        # borrowing counts on a timer, whatever the traffic.
        drop |= {i for i, e in enumerate(sent) if e[3].endswith("fairshare:gateways")}
        return [e for i, e in enumerate(sent) if i not in drop]

    def close(self) -> None:
        self._client.close()


def _setup(config: Path) -> tuple[str, str, str]:
    """The full path's keys: the limited key of team t (budgets on its team, itself and
    its tag), a key of team lend (an organisation with no reservation: it borrows), and a
    key of team t with one request per minute (its second request is refused)."""

    async def run() -> tuple[str, str, str]:
        actor = Actor.operator("tests")
        async with open_tenancy(load_config(config)) as tenancy:
            never = Limits(rpm=BIG, tpm=BIG, rpd=BIG, max_in_flight=100_000)
            await tenancy.teams.update(actor, "t", totals=never)
            full = await tenancy.keys.create(actor, team="t", limits=never, tags=["run"])
            borrower = await tenancy.keys.create(actor, team="lend", limits=never)
            refused = await tenancy.keys.create(actor, team="t", limits=Limits(rpm=1))
            b = tenancy.budgets
            big, soft = Money.from_units(1_000_000), Money.from_units(900_000)
            await b.set(actor, scope="team:t", period="month", max=big, soft=soft)
            await b.set(actor, scope=f"key:{full.key.id}", period="day", max=big)
            await b.set(actor, scope="tag:org:test-org/run", period="month", max=big)
            return full.secret, borrower.secret, refused.secret

    return asyncio.run(run())


def _gateway(
    tmp_path: Path, start_sim: StartSim, start_gateway: StartGateway, port: int
) -> tuple[GatewayProcess, tuple[str, str, str]]:
    url_file = tmp_path / "redis-url"
    url_file.write_text(f"redis://127.0.0.1:{port}/0")
    sims = [start_sim("--model", "m", "--speed", "0") for _ in range(2)]
    models = [
        model(
            "m",
            *sims,
            pool="p",
            cost={"input_per_mtok": 0.02, "output_per_mtok": 0.2},
        )
    ]
    sections: dict[str, Any] = {
        "state": {"backend": "redis", "url_file": str(url_file)},
        "pools": [{"name": "p", "capacity": 64}],
        "orgs": [
            {"name": "test-org", "share": 0.99, "teams": ["t"], "tags": ["run"]},
            {"name": "lend-org", "share": 0.01, "teams": ["lend"]},
        ],
        "fairshare": {"half_life": "168h"},
        # the fair-share gauges are read from Redis every health interval: rarely here
        "health": {"interval": "30s", "timeout": "1s"},
        "admission": {
            "default_band": "bronze",
            "bands": [
                {"name": "gold", "ceiling": 0.95, "teams": ["t"]},
                {"name": "bronze", "ceiling": 0.9},
            ],
        },
        "tags": {"header": "x-fairgate-tags", "max_per_request": 8, "allowed": ["run"]},
    }
    gateway = start_gateway(models, **sections)
    return gateway, _setup(gateway.config)


def _send(client: httpx.Client, secret: str, tag: str | None = None) -> tuple[float, int]:
    """One chat completion; (the time its answer arrived, its status)."""
    headers = {"authorization": f"Bearer {secret}"}
    if tag is not None:
        headers["x-fairgate-tags"] = tag
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    response = client.post("/v1/chat/completions", json=body, headers=headers)
    return time.time(), response.status_code


def _windows(
    monitor: Monitor, client: httpx.Client, secret: str, count: int, tag: str | None = None
) -> list[tuple[list[str], list[str], int]]:
    """``count`` requests one at a time: per request, the commands Redis received before
    its answer arrived and in the pause after it, and its status."""
    out = []
    for _ in range(count):
        start = time.time()
        answered, status = _send(client, secret, tag)
        time.sleep(PAUSE)
        end = time.time()
        before = [e[2] for e in monitor.between(start, answered)]
        after = [e[2] for e in monitor.between(answered, end)]
        out.append((before, after, status))
    return out


@pytest.mark.slow
def test_one_round_trip_in_and_one_out_per_request_on_the_full_path(
    tmp_path: Path, own_redis: int, start_sim: StartSim, start_gateway: StartGateway
) -> None:
    gateway, (full, borrower, refused) = _gateway(tmp_path, start_sim, start_gateway, own_redis)
    monitor = Monitor(own_redis)
    try:
        with httpx.Client(base_url=gateway.url, timeout=30) as client:
            for secret in (full, borrower, refused):
                _send(client, secret)  # key cache, connections, scripts loaded: warm
            time.sleep(1.5)
            idle_start = time.time()
            time.sleep(2.0)
            idle = monitor.between(idle_start, time.time())
            plain = _windows(monitor, client, full, 10, tag="run")
            borrowing = _windows(monitor, client, borrower, 4)
            refusals = _windows(monitor, client, refused, 3)
    finally:
        monitor.close()
    assert idle == []  # nothing in the background here: every command below is a request's
    for before, after, status in plain + borrowing:
        assert status == 200
        # one script in, one out (the settle may reach Redis before the answer reaches us)
        assert before + after == ["EVALSHA", "EVALSHA"], (before, after)
        assert before[:1] == ["EVALSHA"]
    first, *head_refused = refusals
    assert first == (["EVALSHA"], [], 429)  # charged nothing, claimed nothing, nothing out
    # refused again in-process (the head check knows the Retry-After): no round trip
    assert head_refused == [([], [], 429), ([], [], 429)]
