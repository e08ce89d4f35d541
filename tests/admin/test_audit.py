"""``GET /admin/audit``: filtered by role and by actor, paged, documented in OpenAPI."""

from __future__ import annotations

from admin.conftest import Api


async def test_actor_and_action_narrow_the_listing(api: Api) -> None:
    await api.client.post("/admin/keys", headers=api.as_user("tom"), json={"team": "a1"})
    await api.client.post("/admin/keys", headers=api.as_user("olga"), json={"team": "a2"})
    tom = await api.client.get("/admin/audit", params={"actor": "user:tom"}, headers=api.master)
    assert tom.status_code == 200
    assert {(e["actor"], e["action"]) for e in tom.json()["data"]} == {("user:tom", "key.created")}
    both = await api.client.get(
        "/admin/audit", params={"action": "key.created", "limit": 2}, headers=api.master
    )
    assert [e["actor"] for e in both.json()["data"]] == ["user:olga", "user:tom"]


async def test_a_team_admin_sees_only_their_teams_events_even_when_naming_another_actor(
    api: Api,
) -> None:
    await api.client.post("/admin/keys", headers=api.as_user("olga"), json={"team": "a2"})
    await api.client.post("/admin/keys", headers=api.as_user("tom"), json={"team": "a1"})
    seen = await api.client.get(
        "/admin/audit", params={"actor": "user:olga"}, headers=api.as_user("tom")
    )
    assert seen.status_code == 200
    assert seen.json()["data"] == []
    olga = await api.client.get(
        "/admin/audit", params={"actor": "user:olga"}, headers=api.as_user("olga")
    )
    assert "key.created" in {e["action"] for e in olga.json()["data"]}


async def test_each_event_carries_its_place_and_seal_in_the_chain(api: Api) -> None:
    events = (await api.client.get("/admin/audit", headers=api.master)).json()["data"]
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(len(events), 0, -1))
    assert all(len(e["hash"]) == 64 for e in events)


async def test_an_out_of_range_limit_is_a_400_envelope(api: Api) -> None:
    for limit in ("0", "1001", "x"):
        refused = await api.client.get("/admin/audit", params={"limit": limit}, headers=api.master)
        assert refused.status_code == 400
        assert refused.json()["error"]["type"] == "invalid_request_error"


async def test_the_openapi_document_describes_the_audit_page(api: Api) -> None:
    spec = (await api.client.get("/admin/openapi.json", headers=api.master)).json()
    answer = spec["paths"]["/admin/audit"]["get"]["responses"]["200"]
    assert answer["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/AuditPage"
    }
    event = spec["components"]["schemas"]["AuditEventOut"]
    assert {"seq", "hash", "actor", "action"} <= set(event["properties"])
    names = {p["name"] for p in spec["paths"]["/admin/audit"]["get"]["parameters"]}
    assert {"since", "actor", "action", "before_id", "limit"} <= names


async def test_disabling_a_project_audits_each_key_it_revokes(api: Api) -> None:
    """The keys a project's disabling revokes are revocations like any other: one
    ``key.revoked`` per key, by the same actor, placed in the key's team."""
    tom = api.as_user("tom")
    made = [
        (
            await api.client.post("/admin/keys", headers=tom, json={"team": "a1", "project": "p"})
        ).json()["id"]
        for _ in range(2)
    ]
    already = made[1]
    assert (await api.client.delete(f"/admin/keys/{already}", headers=tom)).status_code == 200
    gone = await api.client.delete("/admin/teams/a1/projects/p", headers=tom)
    assert gone.status_code == 200
    seen = await api.client.get("/admin/audit", headers=api.as_user("val"))  # a1's viewer
    revoked = [e for e in seen.json()["data"] if e["action"] == "key.revoked"]
    by_target = {e["target"]: e for e in revoked}
    assert set(by_target) == {f"key:{made[0]}", f"key:{already}"}
    assert len(revoked) == 2  # the key revoked before is not revoked twice
    cascade = by_target[f"key:{made[0]}"]
    assert cascade["actor"] == "user:tom"
    assert cascade["detail"] == {"project": "a1/p"}
    assert (await api.client.get(f"/admin/keys/{made[0]}", headers=tom)).json()["revoked_at"]
