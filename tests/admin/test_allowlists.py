"""IP allowlists through the admin API: who may set which list, who sees it, what is refused.

The tree is ``tenancy.world``: tom is team_admin of a1 (org A), olga org_admin of A,
bob org_admin of B, mia a member of a1 with a key of her own, vic a viewer of A.
"""

from __future__ import annotations

from typing import Any

import httpx

from admin.conftest import Api
from fairgate.core.address_lists import MAX_CIDRS
from fairgate.tenancy import Actor

OPERATOR = Actor.operator("test")


async def put(api: Api, who: str | None, kind: str, name: str, cidrs: Any) -> httpx.Response:
    headers = api.master if who is None else api.as_user(who)
    body = {"kind": kind, "name": name, "cidrs": cidrs}
    return await api.client.put("/admin/allowlists", headers=headers, json=body)


async def listed(api: Api, who: str | None) -> set[tuple[str, str]]:
    headers = api.master if who is None else api.as_user(who)
    answer = await api.client.get("/admin/allowlists", headers=headers)
    assert answer.status_code == 200, answer.text
    return {(a["kind"], a["name"]) for a in answer.json()["data"]}


def error(answer: httpx.Response) -> tuple[int, str]:
    return answer.status_code, answer.json()["error"]["code"]


async def test_a_team_admin_cannot_widen_or_set_the_organisations_list(api: Api) -> None:
    assert (await put(api, "olga", "org", "A", ["10.0.0.0/8"])).status_code == 200
    assert error(await put(api, "tom", "org", "A", ["0.0.0.0/0"])) == (403, "forbidden")
    assert error(await put(api, "tom", "org", "A", [])) == (403, "forbidden")
    (org_list,) = [
        a
        for a in (await api.client.get("/admin/allowlists", headers=api.master)).json()["data"]
        if a["kind"] == "org"
    ]
    assert org_list["cidrs"] == ["10.0.0.0/8"]


async def test_the_teams_admins_set_the_team_and_key_lists_others_get_403_or_404(
    api: Api,
) -> None:
    a1_key, b1_key, mia_key = (api.world.keys[k] for k in ("a1", "b1", "mia"))
    assert (await put(api, "tom", "team", "a1", ["10.1.0.0/16"])).status_code == 200
    assert (await put(api, "tom", "key", a1_key, ["10.1.2.0/24"])).status_code == 200
    assert (await put(api, "olga", "key", mia_key, ["10.1.3.0/24"])).status_code == 200
    # another team's admin, another organisation's admin: the scope does not exist for them
    assert error(await put(api, "tom", "key", b1_key, ["0.0.0.0/0"])) == (404, "key_not_found")
    assert error(await put(api, "tom", "team", "a2", ["0.0.0.0/0"])) == (404, "team_not_found")
    assert error(await put(api, "bob", "key", a1_key, ["0.0.0.0/0"])) == (404, "key_not_found")
    assert error(await put(api, "bob", "team", "a1", ["0.0.0.0/0"])) == (404, "team_not_found")
    assert error(await put(api, "bob", "org", "A", ["0.0.0.0/0"])) == (404, "org_not_found")
    # a member sees her own key, a viewer the organisation: neither may set a list
    assert error(await put(api, "mia", "key", mia_key, ["0.0.0.0/0"])) == (403, "forbidden")
    assert error(await put(api, "vic", "team", "a1", ["0.0.0.0/0"])) == (403, "forbidden")
    assert error(await put(api, "vic", "org", "A", ["0.0.0.0/0"])) == (403, "forbidden")
    lists = (await api.client.get("/admin/allowlists", headers=api.master)).json()["data"]
    assert {(a["kind"], a["name"]): a["cidrs"] for a in lists} == {
        ("team", "a1"): ["10.1.0.0/16"],
        ("key", a1_key): ["10.1.2.0/24"],
        ("key", mia_key): ["10.1.3.0/24"],
    }


async def test_each_caller_lists_only_what_it_may_see(api: Api) -> None:
    keys = api.world.keys
    for kind, name in [
        ("org", "A"),
        ("org", "B"),
        ("team", "a1"),
        ("team", "b1"),
        ("key", keys["a1"]),
        ("key", keys["mia"]),
        ("key", keys["b1"]),
    ]:
        assert (await put(api, None, kind, name, ["192.0.2.0/24"])).status_code == 200
    everything = await listed(api, None)
    assert len(everything) == 7
    assert await listed(api, "pat") == everything  # proxy_viewer
    assert await listed(api, "olga") == {
        ("org", "A"),
        ("team", "a1"),
        ("key", keys["a1"]),
        ("key", keys["mia"]),
    }
    assert await listed(api, "vic") == await listed(api, "olga")
    assert await listed(api, "tom") == {("team", "a1"), ("key", keys["a1"]), ("key", keys["mia"])}
    assert await listed(api, "bob") == {("org", "B"), ("team", "b1"), ("key", keys["b1"])}
    assert await listed(api, "mia") == set()  # a member: not even her own key's list
    assert await listed(api, "ua") == set()


async def test_a_malformed_network_is_a_400_naming_it_and_nothing_is_stored(api: Api) -> None:
    answer = await put(api, None, "team", "a1", ["10.1.0.0/16", "10.1.0.5/16"])
    assert error(answer) == (400, "invalid_cidr")
    message = answer.json()["error"]["message"]
    assert message.startswith("cidrs[1]: '10.1.0.5/16' has host bits set")
    assert "10.1.0.0/16" in message
    answer = await put(api, None, "team", "a1", ["10.1.0.0/16", "lab-network"])
    assert error(answer) == (400, "invalid_cidr")
    assert answer.json()["error"]["message"].startswith("cidrs[1]: ")
    assert "'lab-network'" in answer.json()["error"]["message"]
    answer = await put(api, None, "team", "a1", ["::ffff:10.0.0.0/104"])
    assert error(answer) == (400, "invalid_cidr")
    assert "write the IPv4 network" in answer.json()["error"]["message"]
    assert await listed(api, None) == set()


async def test_bodies_outside_the_schema_are_400(api: Api) -> None:
    for body in [
        {"kind": "project", "name": "a1", "cidrs": []},
        {"kind": "team", "name": "a1"},
        {"kind": "team", "name": "a1", "cidrs": "10.0.0.0/8"},
        {"kind": "team", "name": "a1", "cidrs": [], "extra": 1},
        {"kind": "team", "name": "a1", "cidrs": [f"10.0.{i // 256}.{i % 256}" for i in range(257)]},
    ]:
        answer = await api.client.put("/admin/allowlists", headers=api.master, json=body)
        assert answer.status_code == 400, (body, answer.text)
        assert answer.json()["error"]["type"] == "invalid_request_error"
    assert MAX_CIDRS == 256


async def test_the_answer_is_the_stored_normal_form_and_an_empty_list_removes_it(
    api: Api,
) -> None:
    answer = await put(api, "olga", "org", "A", ["10.0.0.0/8", "192.0.2.7", "::1", "10.0.0.0/8"])
    assert answer.json() == {
        "kind": "org",
        "name": "A",
        "cidrs": ["10.0.0.0/8", "192.0.2.7/32", "::1/128"],
    }
    cleared = await put(api, "olga", "org", "A", [])
    assert cleared.status_code == 200 and cleared.json()["cidrs"] == []
    assert await listed(api, None) == set()
    events = await api.tenancy.audit.list(OPERATOR)
    changes = [e for e in events if e.action.startswith("allowlist.")]
    assert [(e.action, e.target, e.actor) for e in changes] == [
        ("allowlist.cleared", "org:A", "user:olga"),
        ("allowlist.set", "org:A", "user:olga"),
    ]
    assert changes[1].detail == {"cidrs": ["10.0.0.0/8", "192.0.2.7/32", "::1/128"]}
    assert [e.action for e in await api.tenancy.audit.list(await api.world.actor("olga"))][:2] == [
        "allowlist.cleared",
        "allowlist.set",
    ]


async def test_the_routes_and_their_body_are_in_the_openapi_document(api: Api) -> None:
    document = (await api.client.get("/admin/openapi.json", headers=api.master)).json()
    assert set(document["paths"]["/admin/allowlists"]) == {"get", "put"}
    body = document["components"]["schemas"]["AllowlistBody"]
    assert body["properties"]["kind"]["enum"] == ["org", "team", "key"]
    assert body["properties"]["cidrs"]["maxItems"] == MAX_CIDRS
