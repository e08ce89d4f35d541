"""Admin authentication: master key or admin token; each refusal a 401, audited and counted."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import event

from admin.conftest import MASTER_KEY, Api, admin_guard, make_client
from fairgate.admin import build_admin_app
from fairgate.auth import sha256
from fairgate.config import SecretRef
from fairgate.store import Store, StoreUnavailable
from fairgate.tenancy import Actor, Tenancy
from store.backends import FakeClock

OPERATOR = Actor.operator("test")


def master() -> dict[str, str]:
    return {"authorization": f"Bearer {MASTER_KEY}"}


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


async def test_a_network_over_its_limit_gets_429_but_the_master_key_and_tokens_still_work(
    api: Api,
) -> None:
    bad = {"authorization": "Bearer nope"}
    for _ in range(5):
        assert (await api.client.get("/admin/keys", headers=bad)).status_code == 401
    blocked = await api.client.get("/admin/keys", headers=bad)
    assert blocked.status_code == 429
    assert int(blocked.headers["retry-after"]) >= 1
    assert blocked.json()["error"]["type"] == "rate_limit_error"
    unknown_token = {"authorization": "Bearer fga-" + "B" * 43}
    assert (await api.client.get("/admin/keys", headers=unknown_token)).status_code == 429
    # the master key is compared before any failure count, a valid token is looked up
    assert (await api.client.get("/admin/keys", headers=api.master)).status_code == 200
    assert (await api.client.get("/admin/keys", headers=api.as_user("tom"))).status_code == 200
    assert len(await _failures(api)) == 5  # past the limit nothing more is audited
    app = api.client._transport.app  # type: ignore[attr-defined]
    async with make_client(app, addr="192.0.2.77") as other:  # another network is unaffected
        assert (await other.get("/admin/keys", headers=bad)).status_code == 401
    api.clock.advance(180)
    assert (await api.client.get("/admin/keys", headers=bad)).status_code == 401


async def test_token_lookups_of_a_blocked_network_stop_at_the_ceilings_share(
    api: Api, store: Store
) -> None:
    clock = FakeClock()
    app = build_admin_app(
        tenancy=Tenancy(store, clock=clock),
        master_key_sha256=sha256(MASTER_KEY),
        guard=admin_guard(clock, failures_per_minute=2, lookups_per_minute=10),
        registry=CollectorRegistry(),
        models_ready=dict,
        draining=lambda: False,
    )
    statements: list[str] = []

    def count(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        if "admin_tokens" in statement:
            statements.append(statement)

    event.listen(store.engine.sync_engine, "before_cursor_execute", count)
    try:
        async with make_client(app) as client:
            answers = []
            for n in range(40):
                spray = {"authorization": "Bearer fga-" + f"{n:043d}"}
                answers.append((await client.get("/admin/whoami", headers=spray)).status_code)
            assert answers[:2] == [401, 401] and set(answers[2:]) == {429}
            assert len(statements) == 5  # 2 while within the limit, then half the ceiling
            # the ceiling's share for failing networks is used up: the master key still works
            assert (await client.get("/admin/keys", headers=master())).status_code == 200
    finally:
        event.remove(store.engine.sync_engine, "before_cursor_execute", count)


async def test_without_a_master_key_only_admin_tokens_work(api: Api, store: Store) -> None:
    clock = FakeClock()
    app = build_admin_app(
        tenancy=Tenancy(store, clock=clock),
        master_key_sha256=None,
        guard=admin_guard(clock),
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
        guard=admin_guard(clock),
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


async def test_a_master_key_rotated_in_a_vault_replaces_the_old_one(api: Api, store: Store) -> None:
    clock = FakeClock()
    ref = SecretRef.model_validate("vault:secret/admin#master")
    ref.cell.set(MASTER_KEY)
    app = build_admin_app(
        tenancy=Tenancy(store, clock=clock),
        master_key_sha256=sha256(ref.read()),
        guard=admin_guard(clock),
        registry=CollectorRegistry(),
        models_ready=dict,
        draining=lambda: False,
        master_key_changes=ref.cell,
    )
    rotated = "fairgate-master-rotated-in-the-vault"
    async with make_client(app) as client:
        assert (await client.get("/admin/keys", headers=master())).status_code == 200
        ref.cell.set(rotated)
        assert (await client.get("/admin/keys", headers=master())).status_code == 401
        new = {"authorization": f"Bearer {rotated}"}
        assert (await client.get("/admin/keys", headers=new)).status_code == 200
