"""The real-browser harness: Debian's Chromium through Playwright, and the gateway plus the
simulator as real processes.

def test_x(front_door: FrontDoor, page: Page, shots: Screenshots) -> None:
    page.goto(front_door.url + "/")
    shots.take(page, "landing")

``front_door.url`` is ``http://localhost:PORT``: Chromium treats localhost as a secure
context, so the ``__Host-`` session cookie (Secure) works over plain HTTP there, as it does
behind a TLS-terminating proxy in production. Chromium is never downloaded: a missing
/usr/bin/chromium skips these tests locally and fails them under CI=true.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.browser.harness import (
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    Screenshots,
    clear_folder,
    free_port,
    off_loop,
)
from tests.e2e.conftest import StartGateway, StartSim, model

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess

MODEL = "m"
COST = {"input_per_mtok": 1000.0, "output_per_mtok": 10000.0}
"""Prices high enough that one short request shows as spend on /account."""
MASTER_KEY = "a-master-key-for-the-browser-tests"


@dataclass(frozen=True)
class FrontDoor:
    """A running gateway with its web pages, in front of one simulator."""

    url: str
    """The client listener as ``http://localhost:PORT`` (what the browser opens)."""
    gateway: GatewayProcess
    sim: SimProcess
    config: Path
    log: Path
    """The gateway's stderr (what it logged)."""

    @property
    def admin_url(self) -> str:
        """The admin listener as ``http://localhost:PORT``."""
        return self.gateway.admin_url.replace("127.0.0.1", "localhost")

    def logged(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


StartFrontDoor = Callable[..., FrontDoor]


def _missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: the browser tests are required, not optional)")
    pytest.skip(reason)


@pytest.fixture
def chromium() -> Iterator[Any]:
    """A headless Chromium from /usr/bin/chromium, per test.

    Per test, not per session: the sync Playwright API keeps an event loop running in the
    main thread while it is open, which would break every later test that calls
    ``asyncio.run``; helpers that need a loop meanwhile go through ``off_loop``.
    """
    if not CHROMIUM.exists():
        _missing(f"{CHROMIUM} is not installed (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def context(chromium: Any) -> Iterator[Any]:
    """A fresh browser profile (no cookies) per test."""
    ctx = chromium.new_context(viewport={"width": 1100, "height": 800})
    try:
        yield ctx
    finally:
        ctx.close()


@pytest.fixture
def page(context: Any) -> Any:
    return context.new_page()


@pytest.fixture
def shots(request: pytest.FixtureRequest) -> Screenshots:
    """Screenshots of this test under ``artifacts/screenshots/<test>/``."""
    folder = ARTIFACTS / request.node.name.replace("[", "-").replace("]", "")
    clear_folder(folder)
    return Screenshots(folder)


@pytest.fixture
def start_front_door(
    start_sim: StartSim, start_gateway: StartGateway, tmp_path: Path
) -> StartFrontDoor:
    """Start a simulator (``sim_args``) and a gateway with the web pages on localhost;
    ``pool`` puts the model in that pool (declare it under ``pools``)."""

    def start(*sim_args: str, pool: str | None = None, **sections: Any) -> FrontDoor:
        sim = start_sim("--model", MODEL, *sim_args)
        port = free_port()
        url = f"http://localhost:{port}"
        log = tmp_path / f"gateway-{port}.log"
        (tmp_path / "master.key").write_text(MASTER_KEY + "\n")
        sections.setdefault("listen", {"host": "127.0.0.1", "port": port})
        sections.setdefault("master_key_file", str(tmp_path / "master.key"))
        for key, value in front_door_sections(url).items():
            sections.setdefault(key, value)
        models = [model(MODEL, sim, cost=COST, **({"pool": pool} if pool else {}))]
        gw = off_loop(lambda: start_gateway(models, stderr=log, **sections))
        return FrontDoor(url=url, gateway=gw, sim=sim, config=gw.config, log=log)

    return start


@pytest.fixture
def front_door(start_front_door: StartFrontDoor) -> FrontDoor:
    """A gateway with its web pages, in front of a simulator at 200 tokens/s."""
    return start_front_door("--speed", "200")


def front_door_sections(url: str) -> dict[str, Any]:
    """The configuration sections the web pages need for a gateway reached at ``url``."""
    return {"public_url": url}
