"""Whose budget a request charges, through a real gateway and simulated engines.

- Tags belong to a tenant: org ``other``'s key sends the tag ``grant`` that org
  ``test-org`` has a budget on, and that budget is not charged; a tag outside the
  caller's allow-list is a 400 naming the header, never another tenant's list.
- A per-model budget set on an alias binds the model the alias stands for.
- A request served by a fallback is charged to the fallback's per-model budget,
  and a spent budget of a fallback refuses the requests that could reach it.

Prices are one micro GPU-hour per completion token (``PRICES``), so a request
with ``max_tokens=10`` costs exactly 10 and a budget of 20 has room for two.

The three cases run on one gateway per state back end (``shared``), each on teams of
its own: the tag case on ``t`` and ``u``, the alias case on ``t2``, the fallback case on
``t3``; every budget is set before that gateway starts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.e2e.conftest import AUTH, StartSim, add_key, model, state_section, write_config
from tests.e2e.test_budgets import budget_refusal
from tests.e2e.test_limits import OPERATOR, PRICES, TAGS, me, refusal

from fairgate.config import load_config
from fairgate.core.money import Money
from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess
from fairgate.tenancy import open_tenancy

pytestmark = pytest.mark.slow

ORGS = [
    {"name": "test-org", "share": 0.5, "teams": ["t", "t2", "t3"], "tags": ["grant", "a-only"]},
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


@dataclass(frozen=True, slots=True)
class Shared:
    """A gateway on one state back end: model m (alias m-alias), x (its engine fails every
    request) falling back to y; the budgets of all three cases in force."""

    config: Path
    gateway: GatewayProcess
    m: SimProcess
    y: SimProcess

    def key(self, team: str) -> dict[str, str]:
        return {"authorization": f"Bearer {add_key(self.config, team)}"}

    def served(self, sim: SimProcess) -> int:
        return len(sim.requests("/v1/chat/completions"))


@pytest.fixture(scope="module", params=["memory", "redis"])
def shared(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Shared]:
    directory = tmp_path_factory.mktemp(f"shared-{request.param}")
    state = state_section(request.param, directory, request)
    with ExitStack() as stack:
        sim = stack.enter_context(SimProcess("--model", "m", "--speed", "0"))
        broken = stack.enter_context(SimProcess("--model", "x", "--speed", "0"))
        broken.faults(fail_next=1_000_000, fail_status=503)
        sim_y = stack.enter_context(SimProcess("--model", "y", "--speed", "0"))
        config = write_config(
            directory,
            [
                model("m", sim, cost=PRICES, aliases=["m-alias"]),
                model("x", broken, cost=PRICES, fallbacks=["y"]),
                model("y", sim_y, cost=PRICES),
            ],
            orgs=ORGS,
            proxy={"retries": 2},
            breaker={"failures": 1000},
            state=state,
        )
        set_budgets(
            config,
            ("tag:org:test-org/grant", None, 20),  # the tag case
            ("team:t2", "m-alias", 20),  # the alias case
            ("team:t3", "x", 1000),  # the fallback case
            ("team:t3", "y", 20),
        )
        gateway = stack.enter_context(GatewayProcess(config))
        yield Shared(config, gateway, sim, sim_y)


def test_another_orgs_key_sending_the_tag_charges_nothing_of_its_budget(shared: Shared) -> None:
    gateway, stranger = shared.gateway, shared.key("u")
    before = shared.served(shared.m)
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
    assert shared.served(shared.m) - before == 9


def test_a_budget_set_on_an_alias_binds_the_model_it_stands_for(shared: Shared) -> None:
    gateway, key = shared.gateway, shared.key("t2")
    before = shared.served(shared.m)
    secret = key["authorization"].removeprefix("Bearer ")
    (budget,) = me(gateway, secret)["budgets"]
    assert budget["model"] == "m"  # stored under the canonical name
    assert ask(gateway, "m", key=key).status_code == 200
    assert ask(gateway, "m-alias", key=key).status_code == 200
    budget_refusal(ask(gateway, "m", key=key), "team 't2' for model 'm'")
    budget_refusal(ask(gateway, "m-alias", key=key), "team 't2' for model 'm'")
    assert shared.served(shared.m) - before == 2


def test_a_fallback_is_charged_to_its_own_per_model_budget(shared: Shared) -> None:
    gateway, key = shared.gateway, shared.key("t3")
    before = shared.served(shared.y)
    for _ in range(2):
        answer = ask(gateway, "x", key=key)
        assert answer.status_code == 200, answer.text
        assert answer.json()["model"] == "y"
    secret = key["authorization"].removeprefix("Bearer ")
    spent = {b["model"]: b["spent_micro"] for b in me(gateway, secret)["budgets"]}
    assert spent == {"x": 0, "y": 20}  # the model that served pays, the other is refunded
    # y's budget is spent: a request that could only be served by y is refused,
    # whether it names y or the model falling back to it
    budget_refusal(ask(gateway, "x", key=key), "team 't3' for model 'y'")
    budget_refusal(ask(gateway, "y", key=key), "team 't3' for model 'y'")
    assert shared.served(shared.y) - before == 2


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
