"""Whose budget a request charges, through a real gateway and simulated engines.

- Tags belong to a tenant: org ``other``'s key sends the tag ``grant`` that org
  ``test-org`` has a budget on, and that budget is not charged; a tag outside the
  caller's allow-list is a 400 naming the header, never another tenant's list.
- A per-model budget set on an alias binds the model the alias stands for.
- A request served by a fallback is charged to the fallback's per-model budget,
  and a spent budget of a fallback refuses the requests that could reach it.

Prices are one micro GPU-hour per completion token (``PRICES``), so a request
with ``max_tokens=10`` costs exactly 10 and a budget of 20 has room for two.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.e2e.conftest import AUTH, StartSim, add_key, model, write_config
from tests.e2e.test_budgets import budget_refusal
from tests.e2e.test_limits import OPERATOR, PRICES, TAGS, me, refusal

from fairgate.config import load_config
from fairgate.core.money import Money
from fairgate.server.process import GatewayProcess
from fairgate.tenancy import open_tenancy

pytestmark = pytest.mark.slow

ORGS = [
    {"name": "test-org", "share": 0.5, "teams": ["t"], "tags": ["grant", "a-only"]},
    {"name": "other", "share": 0.5, "teams": ["u"], "tags": ["grant"]},
]


def set_budgets(config: Path, *budgets: tuple[str, str | None, int]) -> None:
    """Monthly budgets (scope, model or None, micro GPU-hours), set as the operator."""

    async def apply() -> None:
        async with open_tenancy(load_config(config)) as tenancy:
            for scope, name, micro in budgets:
                await tenancy.budgets.set(
                    OPERATOR, scope=scope, model=name, period="month", max=Money(micro)
                )

    asyncio.run(apply())


def ask(
    gateway: GatewayProcess, name: str, *, key: dict[str, str] = AUTH, tags: str | None = None
) -> httpx.Response:
    headers = {**key}
    if tags is not None:
        headers[TAGS] = tags
    body: dict[str, Any] = {
        "model": name,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 10,
    }
    return httpx.post(gateway.url + "/v1/chat/completions", json=body, headers=headers, timeout=30)


def test_another_orgs_key_sending_the_tag_charges_nothing_of_its_budget(
    tmp_path: Path, start_sim: StartSim, state: dict[str, Any]
) -> None:
    sim = start_sim("--model", "m", "--speed", "0")
    config = write_config(tmp_path, [model("m", sim, cost=PRICES)], orgs=ORGS, state=state)
    set_budgets(config, ("tag:org:test-org/grant", None, 20))
    stranger = {"authorization": f"Bearer {add_key(config, 'u')}"}
    with GatewayProcess(config) as gateway:
        # org other's key sends the very tag test-org's budget is on: five times its room
        assert [ask(gateway, "m", key=stranger, tags="grant").status_code for _ in range(5)] == [
            200
        ] * 5
        # test-org's own budget is untouched: room for two, then spent
        assert [ask(gateway, "m", tags="grant").status_code for _ in range(2)] == [200, 200]
        budget_refusal(ask(gateway, "m", tags="grant"), "tag 'org:test-org/grant'")
        # and the spent budget binds only its owner's requests
        assert ask(gateway, "m", key=stranger, tags="grant").status_code == 200
        assert ask(gateway, "m").status_code == 200  # without the tag, test-org is not bound
        # a tag only test-org may send: refused to the stranger, naming the header only
        status, code, message = refusal(ask(gateway, "m", key=stranger, tags="a-only"))
        assert (status, code) == (400, "tag_not_allowed")
        assert TAGS in message and "test-org" not in message and "grant" not in message
        # a tag nobody listed is refused to everyone
        assert refusal(ask(gateway, "m", tags="made-up"))[:2] == (400, "tag_not_allowed")
        # spelling another tenant's budget as a tag reaches nothing either
        owned = "org:test-org/grant"
        assert refusal(ask(gateway, "m", key=stranger, tags=owned))[:2] == (
            400,
            "tag_not_allowed",
        )
    assert len(sim.requests("/v1/chat/completions")) == 9


def test_a_budget_set_on_an_alias_binds_the_model_it_stands_for(
    tmp_path: Path, start_sim: StartSim, state: dict[str, Any]
) -> None:
    sim = start_sim("--model", "m", "--speed", "0")
    config = write_config(
        tmp_path, [model("m", sim, cost=PRICES, aliases=["m-alias"])], state=state
    )
    set_budgets(config, ("team:t", "m-alias", 20))
    with GatewayProcess(config) as gateway:
        (budget,) = me(gateway)["budgets"]
        assert budget["model"] == "m"  # stored under the canonical name
        assert ask(gateway, "m").status_code == 200
        assert ask(gateway, "m-alias").status_code == 200
        budget_refusal(ask(gateway, "m"), "team 't' for model 'm'")
        budget_refusal(ask(gateway, "m-alias"), "team 't' for model 'm'")
    assert len(sim.requests("/v1/chat/completions")) == 2


def test_a_fallback_is_charged_to_its_own_per_model_budget(
    tmp_path: Path, start_sim: StartSim, state: dict[str, Any]
) -> None:
    broken = start_sim("--model", "x", "--speed", "0")
    broken.faults(fail_next=1000, fail_status=503)
    sim = start_sim("--model", "y", "--speed", "0")
    config = write_config(
        tmp_path,
        [
            model("x", broken, cost=PRICES, fallbacks=["y"]),
            model("y", sim, cost=PRICES),
        ],
        proxy={"retries": 2},
        breaker={"failures": 1000},
        state=state,
    )
    set_budgets(config, ("team:t", "x", 1000), ("team:t", "y", 20))
    with GatewayProcess(config) as gateway:
        for _ in range(2):
            answer = ask(gateway, "x")
            assert answer.status_code == 200, answer.text
            assert answer.json()["model"] == "y"
        spent = {b["model"]: b["spent_micro"] for b in me(gateway)["budgets"]}
        assert spent == {"x": 0, "y": 20}  # the model that served pays, the other is refunded
        # y's budget is spent: a request that could only be served by y is refused,
        # whether it names y or the model falling back to it
        budget_refusal(ask(gateway, "x"), "team 't' for model 'y'")
        budget_refusal(ask(gateway, "y"), "team 't' for model 'y'")
    assert len(sim.requests("/v1/chat/completions")) == 2


def test_a_restart_keeps_an_owned_tags_spend_and_only_its_owners(
    tmp_path: Path, start_sim: StartSim
) -> None:
    """Memory back end: the spend comes back from the records, the owner's records only."""
    sim = start_sim("--model", "m", "--speed", "0")
    config = write_config(
        tmp_path, [model("m", sim, cost=PRICES)], orgs=ORGS, state={"backend": "memory"}
    )
    set_budgets(config, ("tag:org:test-org/grant", None, 25))
    stranger = {"authorization": f"Bearer {add_key(config, 'u')}"}
    with GatewayProcess(config) as gateway:
        assert ask(gateway, "m", key=stranger, tags="grant").status_code == 200
        assert [ask(gateway, "m", tags="grant").status_code for _ in range(2)] == [200, 200]
    with GatewayProcess(config) as gateway:
        # 20 of 25 spent by test-org (the stranger's 10 are not its): one more fits
        assert ask(gateway, "m", tags="grant").status_code == 200
        budget_refusal(ask(gateway, "m", tags="grant"), "tag 'org:test-org/grant'")
