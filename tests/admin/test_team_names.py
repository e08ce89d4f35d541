"""Team names the configuration declares are reserved: the admin API cannot take one.

The window attacked here is the one before a sync: the operator has added team
``physics`` under organisation B to the configuration, and an admin of A tries
to take the name first so that the sync would hand the team (with A's keys and
role bindings) to B, or make B's team A's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry

from admin.conftest import MASTER_KEY, MODELS, Api, admin_guard, make_client
from fairgate.admin import build_admin_app
from fairgate.auth.secrets import sha256
from fairgate.store import Store
from fairgate.tenancy import Tenancy, declared_teams
from store.backends import FakeClock
from tenancy.world import DECLARED, OPERATOR, Declared, build_world

EDITED = (*DECLARED, Declared("D", 0.1, ("physics",)))
"""The configuration after the operator's edit: a new org D declaring team physics."""


@pytest.fixture
async def edited(store: Store) -> AsyncIterator[Api]:
    """The admin app of a gateway whose configuration declares ``physics``, not yet synced."""
    clock = FakeClock()
    world = await build_world(Tenancy(store, clock=clock, models=MODELS))
    tenancy = Tenancy(store, clock=clock, models=MODELS, declared_teams=declared_teams(EDITED))
    world.tenancy = tenancy
    guard = admin_guard(clock)
    app = build_admin_app(
        tenancy=tenancy,
        master_key_sha256=sha256(MASTER_KEY),
        guard=guard,
        registry=CollectorRegistry(),
        models_ready=dict,
        draining=lambda: False,
    )
    async with make_client(app) as client:
        yield Api(client, world, tenancy, guard, clock, {})


@pytest.mark.parametrize(("user", "org"), [("olga", "A"), ("bob", "B"), ("alice", "C")])
async def test_a_declared_team_name_is_refused_to_every_creator(
    edited: Api, user: str, org: str
) -> None:
    teams = await edited.tenancy.teams.list(OPERATOR)
    response = await edited.client.post(
        "/admin/teams", headers=edited.as_user(user), json={"org": org, "name": "physics"}
    )
    assert response.status_code == 409, response.text
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "team_name_reserved")
    assert "reserved by the configuration" in error["message"]
    assert "'D'" not in error["message"]  # which organisation declares it is not told
    assert await edited.tenancy.teams.list(OPERATOR) == teams


async def test_a_name_the_configuration_does_not_declare_is_still_free(edited: Api) -> None:
    response = await edited.client.post(
        "/admin/teams", headers=edited.as_user("olga"), json={"org": "A", "name": "chemistry"}
    )
    assert response.status_code == 201, response.text
    assert (response.json()["org"], response.json()["from_config"]) == ("A", False)
