"""``POST /admin/keys`` with ``"claim": true``: a one-time link in the answer, never the secret."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from sqlalchemy import select

from admin.conftest import MASTER_KEY, MODELS, PUBLIC_URL, Api, admin_guard, make_client
from fairgate.admin import build_admin_app
from fairgate.auth.secrets import looks_like_key, sha256
from fairgate.store import Store
from fairgate.store.tables import audit_events, claim_links
from fairgate.tenancy import Tenancy
from store.backends import FakeClock
from tenancy.world import DECLARED, OPERATOR


async def test_a_claimed_key_answers_with_a_link_that_opens_once(api: Api, store: Store) -> None:
    body = {"team": "a1", "name": "for-ann", "claim": True, "claim_expires_in": "2h"}
    created = await api.client.post("/admin/keys", headers=api.as_user("tom"), json=body)
    assert created.status_code == 201, created.text
    key = created.json()
    assert "secret" not in key and "token" not in key
    assert not any(looks_like_key(str(v)) for v in key.values())
    assert key["claim_url"].startswith(f"{PUBLIC_URL}/claim/")
    assert (key["name"], key["owner"], key["expires_at"]) == ("for-ann", "tom", None)
    token = key["claim_url"].rsplit("/", 1)[1]
    secret = await api.tenancy.claims.redeem(token)
    assert secret is not None and secret.startswith(key["prefix"])
    assert await api.tenancy.claims.redeem(token) is None
    async with store.read() as conn:
        actions = [
            row.action
            for row in await conn.execute(
                select(audit_events.c.action).where(audit_events.c.target == f"key:{key['id']}")
            )
        ]
    assert actions == ["key.created", "claim_link.created", "claim_link.redeemed"]


async def test_the_link_lasts_72h_unless_told_and_the_key_its_own_lifetime(api: Api) -> None:
    body = {"team": "a1", "claim": True, "expires_in": "30d"}
    created = await api.client.post("/admin/keys", headers=api.master, json=body)
    assert created.status_code == 201, created.text
    key = created.json()
    assert key["claim_expires_at"] == "2025-06-18T15:06:40Z"  # FakeClock T0 + 72h
    assert key["expires_at"] == "2025-07-15T15:06:40Z"  # T0 + 30 days


async def test_claim_options_out_of_range_are_400_and_create_nothing(
    api: Api, store: Store
) -> None:
    bad = [
        ({"team": "a1", "claim": True, "claim_expires_in": "31d"}, "invalid_claim_expiry"),
        ({"team": "a1", "claim": True, "claim_expires_in": "soon"}, "invalid_duration"),
        ({"team": "a1", "claim_expires_in": "2h"}, "invalid_request"),
        ({"team": "a1", "claim": "yes"}, "invalid_request"),
    ]
    before = len((await api.client.get("/admin/keys", headers=api.master)).json()["data"])
    for body, code in bad:
        refused = await api.client.post("/admin/keys", headers=api.master, json=body)
        assert refused.status_code == 400, body
        assert refused.json()["error"]["code"] == code, refused.text
    after = len((await api.client.get("/admin/keys", headers=api.master)).json()["data"])
    assert after == before
    async with store.read() as conn:
        assert (await conn.execute(select(claim_links))).first() is None


async def test_a_viewer_gets_403_and_no_link(api: Api, store: Store) -> None:
    body = {"team": "a1", "claim": True}
    refused = await api.client.post("/admin/keys", headers=api.as_user("val"), json=body)
    assert refused.status_code == 403
    async with store.read() as conn:
        assert (await conn.execute(select(claim_links))).first() is None


async def test_without_public_url_a_claim_is_400_naming_the_setting(store: Store) -> None:
    clock = FakeClock()
    tenancy = Tenancy(store, clock=clock, models=MODELS)
    await tenancy.sync_orgs(DECLARED)
    app = build_admin_app(
        tenancy=tenancy,
        master_key_sha256=sha256(MASTER_KEY),
        guard=admin_guard(clock),
        registry=CollectorRegistry(),
        models_ready=lambda: {},
        draining=lambda: False,
    )
    async with make_client(app) as client:
        refused = await client.post(
            "/admin/keys",
            headers={"authorization": f"Bearer {MASTER_KEY}"},
            json={"team": "a1", "claim": True},
        )
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "public_url_unset" and "public_url" in error["message"]
    assert await tenancy.keys.list(OPERATOR) == []
