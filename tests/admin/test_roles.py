"""Roles through HTTP: the service layer's refusals become 403 and 404, and nothing changes.

The full matrix (every write outside every role) is tests/tenancy/test_scope.py;
these cases prove the HTTP mapping and the two-organisation isolation end to end.
"""

from __future__ import annotations

import pytest

from admin.conftest import Api
from fairgate.tenancy import Actor

OPERATOR = Actor.operator("test")


@pytest.mark.parametrize(
    ("user", "method", "path", "body", "status"),
    [
        ("bob", "POST", "/admin/teams", {"org": "A", "name": "t9"}, 404),
        ("bob", "DELETE", "/admin/teams/xa", None, 404),
        ("bob", "POST", "/admin/teams/a1/projects", {"name": "q"}, 404),
        ("bob", "POST", "/admin/keys", {"team": "a1"}, 404),
        ("bob", "POST", "/admin/users/ua/roles", {"role": "member", "team": "a1"}, 404),
        ("olga", "POST", "/admin/users/ua/roles", {"role": "proxy_admin"}, 403),
        ("olga", "POST", "/admin/orgs", {"name": "D"}, 403),
        ("tom", "PATCH", "/admin/teams/a1", {"models": ["llama-8b"]}, 403),
        ("tom", "POST", "/admin/users/ua/roles", {"role": "team_admin", "team": "a1"}, 403),
        ("mia", "POST", "/admin/teams/a1/projects", {"name": "q"}, 403),
        ("vic", "POST", "/admin/keys", {"team": "a1"}, 403),
        ("pat", "DELETE", "/admin/users/ua", None, 403),
    ],
)
async def test_writes_outside_the_role_are_refused_with_nothing_changed(
    api: Api, user: str, method: str, path: str, body: object, status: int
) -> None:
    keys = await api.tenancy.keys.list(OPERATOR)
    teams = await api.tenancy.teams.list(OPERATOR)
    bindings = await api.tenancy.roles.list(OPERATOR)
    response = await api.client.request(method, path, headers=api.as_user(user), json=body)
    assert response.status_code == status, response.text
    assert response.json()["error"]["type"] in {"permission_error", "not_found_error"}
    assert await api.tenancy.keys.list(OPERATOR) == keys
    assert await api.tenancy.teams.list(OPERATOR) == teams
    assert await api.tenancy.roles.list(OPERATOR) == bindings


async def test_listings_are_filtered_to_the_callers_org(api: Api) -> None:
    olga = (await api.client.get("/admin/keys", headers=api.as_user("olga"))).json()["data"]
    bob = (await api.client.get("/admin/keys", headers=api.as_user("bob"))).json()["data"]
    assert {k["org"] for k in olga} == {"A"} and {k["org"] for k in bob} == {"B"}
    teams = (await api.client.get("/admin/teams", headers=api.as_user("bob"))).json()["data"]
    assert {t["name"] for t in teams} == {"b1", "xb"}


async def test_grant_and_remove_a_role_through_the_api(api: Api) -> None:
    olga = api.as_user("olga")
    granted = await api.client.post(
        "/admin/users/ua/roles", headers=olga, json={"role": "team_admin", "team": "a2"}
    )
    assert granted.status_code == 201
    assert granted.json()["scope"] == "a2"
    again = await api.client.post(
        "/admin/users/ua/roles", headers=olga, json={"role": "team_admin", "team": "a2"}
    )
    assert again.status_code == 409
    removed = await api.client.delete(
        "/admin/users/ua/roles", headers=olga, params={"role": "team_admin", "team": "a2"}
    )
    assert removed.status_code == 204
    roles = (await api.client.get("/admin/users/ua/roles", headers=olga)).json()["data"]
    assert roles == []


async def test_every_change_is_in_the_audit_trail_of_its_org(api: Api) -> None:
    await api.client.post("/admin/keys", headers=api.as_user("tom"), json={"team": "a1"})
    events = (await api.client.get("/admin/audit", headers=api.as_user("olga"))).json()["data"]
    newest = events[0]
    assert (newest["action"], newest["actor"], newest["remote"]) == (
        "key.created",
        "user:tom",
        "10.1.2.3",
    )
    bob = (await api.client.get("/admin/audit", headers=api.as_user("bob"))).json()["data"]
    assert "user:tom" not in {e["actor"] for e in bob}
