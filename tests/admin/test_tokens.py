"""Admin tokens and users through the API: shown once, own tokens only, revoked at once."""

from __future__ import annotations

from admin.conftest import Api


async def test_a_user_creates_a_token_for_themselves_and_it_works_at_once(api: Api) -> None:
    created = await api.client.post(
        "/admin/admin-tokens",
        headers=api.as_user("tom"),
        json={"name": "laptop", "expires_in": "7d"},
    )
    assert created.status_code == 201
    token = created.json()
    assert token["secret"].startswith("fga-") and token["user"] == "tom"
    headers = {"authorization": f"Bearer {token['secret']}"}
    assert (await api.client.get("/admin/whoami", headers=headers)).json()["name"] == "user:tom"
    listed = await api.client.get("/admin/admin-tokens", headers=api.as_user("tom"))
    assert token["secret"] not in listed.text
    assert {t["user"] for t in listed.json()["data"]} == {"tom"}
    gone = await api.client.delete(f"/admin/admin-tokens/{token['id']}", headers=headers)
    assert gone.status_code == 204
    assert (await api.client.get("/admin/whoami", headers=headers)).status_code == 401


async def test_nobody_but_a_proxy_admin_makes_tokens_for_someone_else(api: Api) -> None:
    refused = await api.client.post(
        "/admin/admin-tokens", headers=api.as_user("olga"), json={"user": "ua"}
    )
    assert refused.status_code == 403
    made = await api.client.post("/admin/admin-tokens", headers=api.master, json={"user": "ua"})
    assert made.status_code == 201


async def test_an_org_admin_creates_users_in_its_org_only(api: Api) -> None:
    made = await api.client.post("/admin/users", headers=api.as_user("olga"), json={"name": "nu"})
    assert made.status_code == 201 and made.json()["org"] == "A"
    other = await api.client.post(
        "/admin/users", headers=api.as_user("olga"), json={"name": "nb", "org": "B"}
    )
    assert other.status_code == 404
    taken = await api.client.post("/admin/users", headers=api.master, json={"name": "nu"})
    assert taken.status_code == 409


async def test_a_token_revoked_is_audited_where_its_creation_was(api: Api) -> None:
    """Both events are placed in the holder's organisation and name the holder and prefix,
    so the organisation's admins read the revocation as they read the creation."""
    token_id = api.world.token_ids["mia"]
    gone = await api.client.delete(f"/admin/admin-tokens/{token_id}", headers=api.as_user("mia"))
    assert gone.status_code == 204
    seen = await api.client.get("/admin/audit", headers=api.as_user("olga"))
    events = {
        e["action"]: e for e in seen.json()["data"] if e["target"] == f"admin_token:{token_id}"
    }
    assert set(events) == {"admin_token.created", "admin_token.revoked"}
    revoked, created = events["admin_token.revoked"], events["admin_token.created"]
    assert revoked["actor"] == "user:mia"
    assert revoked["detail"] == created["detail"]
    assert revoked["detail"]["user"] == "mia"
    other = await api.client.get("/admin/audit", headers=api.as_user("bob"))
    assert f"admin_token:{token_id}" not in other.text


async def test_disabling_a_user_audits_each_admin_token_it_revokes(api: Api) -> None:
    made = await api.client.post("/admin/admin-tokens", headers=api.as_user("ua"), json={})
    assert made.status_code == 201
    second = made.json()
    first = api.world.token_ids["ua"]
    gone = await api.client.delete("/admin/users/ua", headers=api.as_user("olga"))
    assert gone.status_code == 200
    seen = await api.client.get(
        "/admin/audit", headers=api.as_user("olga"), params={"action": "admin_token.revoked"}
    )
    events = {e["target"]: e for e in seen.json()["data"]}
    assert set(events) == {f"admin_token:{first}", f"admin_token:{second['id']}"}
    assert {e["actor"] for e in events.values()} == {"user:olga"}
    assert events[f"admin_token:{second['id']}"]["detail"] == {
        "user": "ua",
        "prefix": second["prefix"],
    }
