"""A soft limit crossed through the gateway: one webhook alert, once, also across a restart.

The webhook is a real HTTP server in this process (aiohttp, on its own thread);
the budget is a monthly team budget with a soft limit, set in the store before
the gateway starts. Prices as in test_limits: one micro GPU-hour per completion
token, so each request of ``max_tokens=10`` costs exactly 10.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from tests.e2e.conftest import TEST_KEY, StartSim, model
from tests.e2e.robust_wire import until
from tests.e2e.test_limits import OPERATOR, PRICES, chat, configure

from fairgate.config import load_config
from fairgate.core.money import Money
from fairgate.server.process import GatewayProcess
from fairgate.tenancy import open_tenancy

pytestmark = pytest.mark.slow

TOKEN = "a-webhook-bearer-token"


class Webhook:
    """An aiohttp server on a thread of its own, keeping every POST it receives."""

    def __init__(self) -> None:
        self.received: list[tuple[str | None, dict[str, Any]]] = []
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    async def _receive(self, request: web.Request) -> web.Response:
        self.received.append((request.headers.get("authorization"), await request.json()))
        return web.Response(status=204)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/hook", self._receive)
        runner = web.AppRunner(app)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/hook"
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(runner.cleanup())
        self._loop.close()

    def __enter__(self) -> Webhook:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *_: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    with Webhook() as hook:
        yield hook


async def _soft_budget(config: Path) -> None:
    async with open_tenancy(load_config(config)) as tenancy:
        await tenancy.budgets.set(
            OPERATOR, scope="team:t", period="month", max=Money(100), soft=Money(25)
        )


def test_a_soft_limit_sends_one_alert_and_a_restart_sends_none(
    tmp_path: Path, start_sim: StartSim, webhook: Webhook
) -> None:
    (tmp_path / "gw").mkdir()
    (tmp_path / "gw" / "hook.token").write_text(TOKEN + "\n")
    sim = start_sim("--model", "m", "--speed", "0")
    config = configure(
        tmp_path / "gw",
        [model("m", sim, cost=PRICES)],
        alerts={"webhook": {"url": webhook.url, "token_file": "hook.token"}},
    )
    asyncio.run(_soft_budget(config))
    with GatewayProcess(config) as gateway:
        # 10, 20: below the soft limit; 30 crosses it; 40, 50: past it already
        assert [chat(gateway, 10).status_code for _ in range(5)] == [200] * 5
        until(lambda: webhook.received, 10, "the alert arrives")
        assert len(webhook.received) == 1
    authorization, alert = webhook.received[0]
    assert authorization == f"Bearer {TOKEN}"
    assert alert["budget"]["scope_kind"] == "team" and alert["budget"]["scope"] == "t"
    assert alert["type"] == "budget.soft_limit"
    assert alert["soft"]["micro"] == 25 and alert["spent"]["micro"] == 30
    with GatewayProcess(config) as gateway:  # a restart: the stored mark holds
        assert chat(gateway, 10).status_code == 200
        assert chat(gateway, 10).status_code == 200
    assert len(webhook.received) == 1


DENSE_PRICES = {"input_per_mtok": 1.0, "output_per_mtok": 1.0}
"""One micro GPU-hour per token, prompt included."""


async def _soft_budget_of(config: Path, soft: int) -> None:
    async with open_tenancy(load_config(config)) as tenancy:
        await tenancy.budgets.set(
            OPERATOR, scope="team:t", period="month", max=Money(100_000), soft=Money(soft)
        )


def _dense_chat(gateway: GatewayProcess) -> httpx.Response:
    """A chat request whose prompt counts about four times its estimate: punctuation is one
    token a character, and the gateway estimates a prompt at one token per four bytes."""
    return httpx.post(
        gateway.url + "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "!" * 400}], "max_tokens": 1},
        headers={"authorization": f"Bearer {TEST_KEY}"},
        timeout=30,
    )


def test_a_soft_limit_passed_at_settle_is_alerted_once_across_gateways_and_a_restart(
    tmp_path: Path,
    start_sim: StartSim,
    webhook: Webhook,
    pg_database: str,
    redis_state: dict[str, Any],
) -> None:
    # The first request reserves ~130 (its estimate) and settles ~410 (its real prompt):
    # the budget passes its soft limit of 300 when it settles, not at an admission. Every
    # later admission finds it past already; one of them must still send the alert.
    sim = start_sim("--model", "m", "--speed", "0")
    configs = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "pg.url").write_text(pg_database)
        configs.append(
            configure(
                tmp_path / name,
                [model("m", sim, cost=DENSE_PRICES)],
                store={"url_file": "pg.url"},
                state=redis_state,
                alerts={"webhook": {"url": webhook.url}},
            )
        )
    asyncio.run(_soft_budget_of(configs[0], 300))
    with GatewayProcess(configs[0]) as a, GatewayProcess(configs[1]) as b:
        first = _dense_chat(a)
        assert first.status_code == 200, first.text
        assert first.json()["usage"]["prompt_tokens"] > 300
        answers = [_dense_chat(a if i % 2 else b) for i in range(6)]
        assert [x.status_code for x in answers] == [200] * 6
        until(lambda: webhook.received, 10, "the alert arrives")
        time.sleep(1)  # time for a second alert, were one due
    with GatewayProcess(configs[1]) as b:  # a restart: the stored mark holds
        assert _dense_chat(b).status_code == 200
        time.sleep(1)
    assert len(webhook.received) == 1
    (_, alert) = webhook.received[0]
    assert alert["soft"]["micro"] == 300 and alert["spent"]["micro"] > 300
