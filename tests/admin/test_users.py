"""Acting on a user through the API: authority over every role they hold, no enumeration.

- an org admin cannot disable (nor enable, nor change the roles of) a user whose home is
  its organisation but who holds a role it could not grant (a proxy admin): 403, and the
  proxy admin's token keeps working;
- a disabled user is enabled again by ``POST /admin/users/{name}/enable``; the tokens
  revoked at disable stay revoked;
- a role granted (or removed) on a user outside the caller's scope is answered with the
  same bytes as one on a name nobody created, and leaves that user unreadable.
"""

from __future__ import annotations

import pytest

from admin.conftest import Api
from fairgate.accounts import SsoBinding
from fairgate.admin.sso.actors import SsoActors
from fairgate.tenancy import Actor

OPERATOR = Actor.operator("test")


async def _user(api: Api, name: str, *, org: str | None, roles: list[dict[str, str]]) -> str:
    """Create ``name`` with ``roles`` as the operator; its admin token's secret."""
    await api.tenancy.users.create(OPERATOR, name, org=org)
    for binding in roles:
        await api.tenancy.roles.grant(OPERATOR, user=name, **binding)
    return (await api.tenancy.admin_tokens.create(OPERATOR, user=name)).secret


async def _whoami(api: Api, secret: str) -> int:
    response = await api.client.get("/admin/whoami", headers={"authorization": f"Bearer {secret}"})
    return response.status_code


@pytest.mark.parametrize(
    "roles",
    [
        [{"role": "proxy_admin"}],
        [{"role": "org_admin", "org": "A"}, {"role": "proxy_viewer"}],
        [{"role": "member", "team": "a1"}, {"role": "viewer", "org": "B"}],
    ],
    ids=["proxy-admin", "org-admin-and-proxy-viewer", "member-and-viewer-elsewhere"],
)
async def test_an_org_admin_cannot_act_on_a_user_of_its_org_holding_a_role_above_it(
    api: Api, roles: list[dict[str, str]]
) -> None:
    secret = await _user(api, "boss", org="A", roles=roles)
    olga = api.as_user("olga")
    bindings = await api.tenancy.roles.list(OPERATOR, user="boss")

    disabled = await api.client.delete("/admin/users/boss", headers=olga)
    assert disabled.status_code == 403, disabled.text
    assert disabled.json()["error"]["type"] == "permission_error"
    assert await _whoami(api, secret) == 200
    granted = await api.client.post(
        "/admin/users/boss/roles", headers=olga, json={"role": "viewer", "org": "A"}
    )
    assert granted.status_code == 403, granted.text
    removed = await api.client.delete(
        "/admin/users/boss/roles", headers=olga, params={"role": "member", "team": "a1"}
    )
    assert removed.status_code == 403, removed.text
    assert await api.tenancy.roles.list(OPERATOR, user="boss") == bindings

    await api.tenancy.users.disable(OPERATOR, "boss")
    enabled = await api.client.post("/admin/users/boss/enable", headers=olga)
    assert enabled.status_code == 403, enabled.text
    assert (await api.tenancy.users.get(OPERATOR, "boss")).disabled_at is not None


async def test_an_org_admin_still_disables_a_user_whose_every_role_it_could_grant(
    api: Api,
) -> None:
    secret = await _user(
        api,
        "lead",
        org="A",
        roles=[{"role": "org_admin", "org": "A"}, {"role": "member", "team": "a2"}],
    )
    disabled = await api.client.delete("/admin/users/lead", headers=api.as_user("olga"))
    assert disabled.status_code == 200, disabled.text
    assert disabled.json()["disabled_at"] is not None
    assert await _whoami(api, secret) == 401


async def test_enable_brings_a_disabled_user_back_without_its_revoked_tokens(api: Api) -> None:
    olga = api.as_user("olga")
    old = api.world.tokens["tom"]
    assert (await api.client.delete("/admin/users/tom", headers=olga)).status_code == 200
    assert await _whoami(api, old) == 401

    enabled = await api.client.post("/admin/users/tom/enable", headers=olga)
    assert enabled.status_code == 200, enabled.text
    assert enabled.json()["name"] == "tom" and enabled.json()["disabled_at"] is None
    again = await api.client.post("/admin/users/tom/enable", headers=olga)
    assert again.status_code == 200  # enabling twice is a no-op
    assert await _whoami(api, old) == 401  # revoked at disable, revoked for good
    fresh = await api.client.post("/admin/admin-tokens", headers=api.master, json={"user": "tom"})
    assert await _whoami(api, fresh.json()["secret"]) == 200

    events = (await api.client.get("/admin/audit", headers=olga)).json()["data"]
    actions = [(e["action"], e["target"], e["actor"]) for e in events[:3]]
    assert ("user.enabled", "user:tom", "user:olga") in actions
    assert [e["action"] for e in events].count("user.enabled") == 1


async def test_enable_is_refused_outside_the_callers_org(api: Api) -> None:
    await api.tenancy.users.disable(OPERATOR, "ub")
    for user, status in (("olga", 404), ("tom", 404), ("vic", 404), ("pat", 403)):
        answer = await api.client.post("/admin/users/ub/enable", headers=api.as_user(user))
        assert answer.status_code == status, (user, answer.text)
    assert (await api.tenancy.users.get(OPERATOR, "ub")).disabled_at is not None
    unknown = await api.client.post("/admin/users/ghost/enable", headers=api.master)
    assert unknown.status_code == 404


@pytest.mark.parametrize(
    ("caller", "grant"),
    [
        ("tom", {"role": "member", "team": "a1"}),
        ("tom", {"role": "viewer", "team": "a1"}),
        ("olga", {"role": "team_admin", "team": "a2"}),
        ("olga", {"role": "viewer", "org": "A"}),
    ],
)
async def test_a_grant_outside_the_callers_scope_reads_exactly_like_an_unknown_name(
    api: Api, caller: str, grant: dict[str, str]
) -> None:
    headers = api.as_user(caller)
    existing = await api.client.post("/admin/users/ub/roles", headers=headers, json=grant)
    unknown = await api.client.post("/admin/users/nobody-at-all/roles", headers=headers, json=grant)
    assert existing.status_code == unknown.status_code == 404
    assert existing.content == unknown.content
    assert existing.headers.get("content-length") == unknown.headers.get("content-length")
    scope = {k: v for k, v in grant.items()}
    gone = await api.client.delete("/admin/users/ub/roles", headers=headers, params=scope)
    never = await api.client.delete(
        "/admin/users/nobody-at-all/roles", headers=headers, params=scope
    )
    assert gone.status_code == never.status_code == 404
    assert gone.content == never.content

    assert await api.tenancy.roles.list(OPERATOR, user="ub") == []
    listed = (await api.client.get("/admin/users", headers=headers)).json()["data"]
    assert "ub" not in {u["name"] for u in listed}
    roles = await api.client.get("/admin/users/ub/roles", headers=headers)
    assert roles.json()["data"] == []


async def test_a_team_admin_still_adds_a_member_from_its_own_org(api: Api) -> None:
    tom = api.as_user("tom")
    granted = await api.client.post(
        "/admin/users/ua/roles", headers=tom, json={"role": "member", "team": "a1"}
    )
    assert granted.status_code == 201, granted.text
    listed = (await api.client.get("/admin/users", headers=tom)).json()["data"]
    assert "ua" in {u["name"] for u in listed}


async def test_an_org_admin_cannot_create_another_case_of_a_taken_name(api: Api) -> None:
    """A disabled user refuses single sign-on to every case of its name (SCIM's userName
    is not case-exact), so a case variant of alice (proxy_admin) created and disabled by
    an org admin would lock alice out of single sign-on: a name is taken in every case."""
    olga = api.as_user("olga")
    for name in ("ALICE", "Alice", "Olga"):
        made = await api.client.post("/admin/users", headers=olga, json={"name": name})
        assert made.status_code == 409, name
        assert made.json()["error"]["code"] == "user_exists"
        gone = await api.client.delete(f"/admin/users/{name}", headers=olga)
        assert gone.status_code == 404
    claims = [SsoBinding(role="proxy_admin")]
    alice = await SsoActors(api.tenancy.store).actor("alice", claims)
    assert alice is not None and alice.root_admin
    assert (
        await api.client.post("/admin/users", headers=olga, json={"name": "newcomer"})
    ).status_code == 201
