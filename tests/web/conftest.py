"""The real Gateway's client listener, its web pages called over HTTP in-process.

    async def test_x(start_web):
        web = await start_web(landing={"contact": "help@example.org"})
        page = await web.client.get("/")

``start_web(**sections)`` writes a configuration (``tests.e2e.conftest.write_config``:
SQLite in the test's directory, model ``m`` on an address nothing listens on),
builds and starts the Gateway, and gives an ``httpx.AsyncClient`` on
``gateway.proxy_app`` with base URL ``https://gateway.test`` (the session
cookie is Secure, so the client must believe it speaks HTTPS).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.e2e.conftest import pg_database, redis_state, store_section, write_config  # noqa: F401 - fixtures

from fairgate.app import Gateway
from fairgate.config import load_config
from fairgate.tenancy.actor import Actor

BASE = "https://gateway.test"
MODELS = [
    {
        "name": "m",
        "engine": "vllm",
        "aliases": ["m-alias"],
        "upstreams": [{"name": "r0", "url": "http://127.0.0.1:9"}],
    }
]


@dataclass
class Web:
    gateway: Gateway
    client: httpx.AsyncClient

    def other_client(self, addr: str = "10.9.9.9") -> httpx.AsyncClient:
        """A second browser (its own cookie jar), from ``addr``."""
        return client_of(self.gateway, addr)


def client_of(gateway: Gateway, addr: str = "127.0.0.1") -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=gateway.proxy_app, client=(addr, 40000))  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=transport, base_url=BASE, timeout=30)


StartWeb = Callable[..., Awaitable[Web]]


@pytest.fixture
async def start_web(tmp_path: Path) -> AsyncIterator[StartWeb]:
    started: list[Web] = []

    async def start(models: list[dict[str, Any]] | None = None, **sections: Any) -> Web:
        directory = tmp_path / f"gw{len(started)}"
        directory.mkdir()
        path = await asyncio.to_thread(write_config, directory, models or MODELS, **sections)
        gateway = Gateway(load_config(path))
        await gateway.start()
        web = Web(gateway, client_of(gateway))
        started.append(web)
        return web

    yield start
    for web in started:
        await web.client.aclose()
        await web.gateway.stop()


PASSWORD = "correct horse battery staple"


def csrf_of(page: httpx.Response) -> str:
    """The CSRF token in a page's first form."""
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found is not None, page.text[:2000]
    return found.group(1)


SAME_ORIGIN = {"origin": BASE, "sec-fetch-site": "same-origin"}


async def post_form(
    client: httpx.AsyncClient, path: str, form_page: str, **fields: str
) -> httpx.Response:
    """What a browser does: open ``form_page``, fill the form, submit it (same origin)."""
    page = await client.get(form_page)
    return await client.post(path, data={"csrf": csrf_of(page), **fields}, headers=SAME_ORIGIN)


async def sign_up(
    client: httpx.AsyncClient, email: str, password: str = PASSWORD
) -> httpx.Response:
    return await post_form(client, "/signup", "/signup", email=email, password=password)


async def sign_in(
    client: httpx.AsyncClient, email: str, password: str = PASSWORD
) -> httpx.Response:
    """Signs in (the form token from the sign-up page: one token per browser, and a
    signed-in browser's /signin redirects to /account)."""
    return await post_form(client, "/signin", "/signup", email=email, password=password)


async def approved_account(web: Web, email: str, team: str = "t") -> httpx.AsyncClient:
    """A browser signed in as a newly approved account of ``team``."""
    client = web.other_client()
    await sign_up(client, email)
    await web.gateway.accounts.approve(Actor.operator("tests"), email, team=team)
    signed = await sign_in(client, email)
    assert signed.status_code == 303, signed.text
    return client
