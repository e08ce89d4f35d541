"""Admin authentication: master key or admin token; each refusal a 401, audited and counted."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from admin.conftest import MASTER_KEY, Api, make_client
from fairgate.admin import build_admin_app
from fairgate.auth import FailureLimiter
from fairgate.store import Store, StoreUnavailable
from fairgate.tenancy import Actor, Tenancy
from store.backends import FakeClock

OPERATOR = Actor.operator("test")


async def _failures(api: Api) -> list[str]:
    events = await api.tenancy.audit.list(OPERATOR, action="auth.failed")
    return [str((e.detail or {}).get("reason")) for e in events]


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "Bearer ",
        "Basic dXNlcjpwYXNz",
        f"Bearer {MASTER_KEY}x",
        "Bearer fga-" + "A" * 43,
        "Bearer fg-" + "A" * 43,
    ],
)
async def test_a_refused_credential_is_401_audited_and_counted(
    api: Api, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"authorization": authorization}
    response = await api.client.get("/admin/keys", headers=headers)
    assert response.status_code == 401
    assert response.json()["error"] == {
        "message": "invalid admin credential",
        "type": "authentication_error",
        "code": "invalid_admin_credential",
    }
    assert len(await _failures(api)) == 1
    assert MASTER_KEY not in response.text


async def test_the_master_key_and_an_admin_token_are_accepted(api: Api) -> None:
    assert (await api.client.get("/admin/keys", headers=api.master)).status_code == 200
    assert (await api.client.get("/admin/keys", headers=api.as_user("tom"))).status_code == 200
    assert await _failures(api) == []


async def test_a_revoked_token_or_removed_role_applies_to_the_very_next_request(api: Api) -> None:
    headers = api.as_user("tom")
    create = await api.client.post("/admin/keys", headers=headers, json={"team": "a1"})
    assert create.status_code == 201
    await api.tenancy.roles.revoke(OPERATOR, user="tom", role="team_admin", team="a1")
    again = await api.client.post("/admin/keys", headers=headers, json={"team": "a1"})
    assert again.status_code == 404  # a1 is no longer visible to tom
    await api.tenancy.admin_tokens.revoke(OPERATOR, api.world.token_ids["tom"])
    assert (await api.client.get("/admin/whoami", headers=headers)).status_code == 401


async def test_a_disabled_user_cannot_authenticate(api: Api) -> None:
    await api.tenancy.users.disable(OPERATOR, "mia")
    assert (await api.client.get("/admin/whoami", headers=api.as_user("mia"))).status_code == 401


async def test_a_network_that_fails_too_often_gets_429_before_any_lookup(api: Api) -> None:
    bad = {"authorization": "Bearer nope"}
    for _ in range(5):
        assert (await api.client.get("/admin/keys", headers=bad)).status_code == 401
    blocked = await api.client.get("/admin/keys", headers=api.master)  # even a good key waits
    assert blocked.status_code == 429
    assert int(blocked.headers["retry-after"]) >= 1
    assert blocked.json()["error"]["type"] == "rate_limit_error"
    assert len(await _failures(api)) == 5  # the blocked attempt is not looked up nor audited
    app = api.client._transport.app  # type: ignore[attr-defined]
    async with make_client(app, addr="192.0.2.77") as other:  # another network is unaffected
        assert (await other.get("/admin/keys", headers=api.master)).status_code == 200
    api.clock.advance(120)
    assert (await api.client.get("/admin/keys", headers=api.master)).status_code == 200


async def test_without_a_master_key_only_admin_tokens_work(api: Api, store: Store) -> None:
    clock = FakeClock()
    app = build_admin_app(
        tenancy=Tenancy(store, clock=clock),
        master_key_sha256=None,
        failure_limiter=FailureLimiter(5, clock),
        registry=CollectorRegistry(),
        models_ready=dict,
        draining=lambda: False,
    )
    async with make_client(app) as client:
        assert (await client.get("/admin/keys", headers=api.master)).status_code == 401
        assert (await client.get("/admin/keys", headers=api.as_user("pat"))).status_code == 200


async def test_an_unreachable_store_is_503_not_401() -> None:
    store = Store("postgresql://nobody@127.0.0.1:1/none", timeout=1.0)
    clock = FakeClock()
    tenancy = Tenancy(store, clock=clock)
    with pytest.raises(StoreUnavailable):
        await store.connect()  # the gateway started while its database was down
    app = build_admin_app(
        tenancy=tenancy,
        master_key_sha256=None,
        failure_limiter=FailureLimiter(5, clock),
        registry=CollectorRegistry(),
        models_ready=dict,
        draining=lambda: False,
    )
    async with make_client(app) as client:
        response = await client.get(
            "/admin/keys", headers={"authorization": "Bearer fga-" + "A" * 43}
        )
    await store.close()
    assert response.status_code == 503
    assert response.json()["error"]["type"] == "service_unavailable"
