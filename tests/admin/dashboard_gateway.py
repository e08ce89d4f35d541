"""The gateway the dashboard tests drive: the real Gateway (in this test's event loop) with
one simulated engine, its admin app and client listener called over HTTP through ASGI.

Pool ``p`` (C = 4) with model ``m`` on one simulated engine (r0), shares A 0.6 (team t,
TEST_KEY's) and B 0.4 (team tb), three admission bands, a master key, and at most 5
failed authentications a minute per address; its store is SQLite, and PostgreSQL again
(``store_section``, marked ``postgres``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from tests.e2e.conftest import model, pg_database, store_section, write_config

from fairgate.app import Gateway
from fairgate.config import load_config
from fairgate.sim.process import SimProcess
from fairgate.tenancy import Actor

MASTER = "dashboard-master-key-for-tests-0123456789"
OPERATOR = Actor.operator("tests")
BANDS = {
    "queue_size": 100,
    "queue_ttl": "30s",
    "bands": [
        {"name": "platinum", "ceiling": 1.5, "teams": ["hi"]},
        {"name": "gold", "ceiling": 1.0},
        {"name": "bronze", "ceiling": 0.9, "teams": ["t"]},
    ],
}


@dataclass
class Board:
    gateway: Gateway
    admin: httpx.AsyncClient
    proxy: httpx.AsyncClient

    @property
    def master(self) -> dict[str, str]:
        return {"authorization": f"Bearer {MASTER}"}

    async def page(self, path: str = "/admin/dashboard", **headers: str) -> httpx.Response:
        return await self.admin.get(path, headers={**self.master, **headers})

    async def token_for(self, user: str, role: str, **scope: str) -> str:
        tenancy = self.gateway.tenancy
        await tenancy.users.create(OPERATOR, user)
        await tenancy.roles.grant(OPERATOR, user=user, role=role, **scope)
        return (await tenancy.admin_tokens.create(OPERATOR, user=user)).secret


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    """An engine slow enough that 40 tokens keep a request in flight for about 2 s; one for
    the module: the tests read only what their own gateway says, and each gateway's stop
    cancels what it still had on the engine."""
    with SimProcess("--model", "m", "--speed", "20", "--ttft", "0", "--record", "0") as engine:
        yield engine


@pytest.fixture
async def board(
    tmp_path: Path, sim: SimProcess, store_section: dict[str, str]
) -> AsyncIterator[Board]:
    (tmp_path / "master.key").write_text(MASTER + "\n")
    path = await asyncio.to_thread(
        write_config,
        tmp_path,
        [model("m", sim, pool="p")],
        pools=[{"name": "p", "capacity": 4}],
        orgs=[
            {"name": "A", "share": 0.6, "teams": ["t"]},
            {"name": "B", "share": 0.4, "teams": ["tb"]},
        ],
        admission=BANDS,
        master_key_file="master.key",
        store=store_section,
        auth={"failures_per_minute": 5},
        logging={"level": "warning"},
    )
    gateway = Gateway(load_config(path))
    await gateway.start()
    admin = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=gateway.admin_app, client=("10.9.8.7", 40000)),
        base_url="http://admin.test",
    )
    proxy = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=gateway.proxy_app), base_url="http://gw", timeout=60
    )
    try:
        yield Board(gateway, admin, proxy)
    finally:
        await admin.aclose()
        await proxy.aclose()
        await gateway.stop()


__all__ = ["MASTER", "OPERATOR", "Board", "board", "pg_database", "sim", "store_section"]
