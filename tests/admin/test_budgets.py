"""Budgets through the admin API: set twice is one budget, exact amounts, roles, increases."""

from __future__ import annotations

from typing import Any

from admin.conftest import Api


async def _put(api: Api, user: str, **body: Any) -> Any:
    return await api.client.put("/admin/budgets", headers=api.as_user(user), json=body)


async def test_an_org_admin_caps_a_team_and_setting_it_again_changes_that_budget(
    api: Api,
) -> None:
    first = await _put(api, "olga", scope="team:a1", period="month", max="100", soft=80)
    assert first.status_code == 200, first.text
    budget = first.json()
    assert (budget["scope"], budget["period"], budget["model"]) == ("team:a1", "month", None)
    assert (budget["max"], budget["soft"], budget["max_micro"]) == ("100", "80", 100_000_000)
    again = await _put(api, "olga", scope="team:a1", period="month", max=0.5)
    assert again.status_code == 200 and again.json()["id"] == budget["id"]
    assert (again.json()["max"], again.json()["soft"]) == ("0.5", None)
    listed = await api.client.get("/admin/budgets", headers=api.as_user("tom"))
    assert [b["id"] for b in listed.json()["data"]] == [budget["id"]]
    one = await api.client.get(f"/admin/budgets/{budget['id']}", headers=api.as_user("val"))
    assert one.status_code == 200 and one.json()["max_micro"] == 500_000
    book = await api.tenancy.budgets.book()
    assert len(book) == 1


async def test_a_team_admin_may_not_raise_its_own_team_but_caps_its_keys(api: Api) -> None:
    own_team = await _put(api, "tom", scope="team:a1", period="day", max="1")
    assert own_team.status_code == 403
    assert own_team.json()["error"]["type"] == "permission_error"
    key = await _put(api, "tom", scope=f"key:{api.world.keys['mo']}", period="day", max="1")
    assert key.status_code == 200


async def test_another_tenant_sees_nothing_and_its_guesses_change_nothing(api: Api) -> None:
    budget = (await _put(api, "olga", scope="team:a1", period="day", max="3")).json()
    bob = api.as_user("bob")
    assert (await api.client.get("/admin/budgets", headers=bob)).json() == {"data": []}
    for response in [
        await api.client.get(f"/admin/budgets/{budget['id']}", headers=bob),
        await api.client.delete(f"/admin/budgets/{budget['id']}", headers=bob),
        await api.client.post(
            f"/admin/budgets/{budget['id']}/increase", headers=bob, json={"by": 5, "for": "1d"}
        ),
        await _put(api, "bob", scope="team:a1", period="day", max="9"),
    ]:
        assert response.status_code == 404, response.text
        assert response.json()["error"]["type"] == "not_found_error"
    after = await api.client.get(f"/admin/budgets/{budget['id']}", headers=api.as_user("olga"))
    assert after.json()["max"] == "3" and after.json()["increases"] == []


async def test_an_increase_until_a_moment_or_for_a_while_then_delete(api: Api) -> None:
    budget = (await _put(api, "olga", scope="team:a1", period="day", max="3")).json()
    url = f"/admin/budgets/{budget['id']}"
    headers = api.as_user("olga")
    until = await api.client.post(
        f"{url}/increase", headers=headers, json={"by": "2", "until": "2025-06-20T00:00Z"}
    )
    assert until.status_code == 200, until.text
    assert until.json()["increases"][0]["expires_at"] == "2025-06-20T00:00:00Z"
    lasting = await api.client.post(f"{url}/increase", headers=headers, json={"by": 1, "for": "7d"})
    assert lasting.json()["effective_max"] == "6"
    deleted = await api.client.delete(url, headers=headers)
    assert deleted.status_code == 200 and deleted.json()["id"] == budget["id"]
    assert (await api.client.get(url, headers=headers)).status_code == 404


async def test_bad_bodies_are_400_with_the_reason(api: Api) -> None:
    cases = [
        ({"scope": "team:a1", "period": "day", "max": "lots"}, "max"),
        ({"scope": "team:a1", "period": "year", "max": "1"}, "period"),
        ({"scope": "a1", "period": "day", "max": "1"}, "scope"),
        ({"scope": "team:a1", "period": "day", "max": "1", "colour": "red"}, "colour"),
        ({"scope": "team:a1", "period": "day", "max": True}, "max"),
        # finer than the micro GPU-hour the counters hold: refused, not rounded to a cap of 0
        ({"scope": "team:a1", "period": "day", "max": 0.0000001}, "max"),
        ({"scope": "team:a1", "period": "day", "max": "1.0000004"}, "max"),
        ({"scope": "team:a1", "period": "day", "max": "1", "soft": "Infinity"}, "soft"),
    ]
    for body, word in cases:
        response = await api.client.put("/admin/budgets", headers=api.master, json=body)
        assert response.status_code == 400, body
        assert word in response.json()["error"]["message"], response.text
    assert (await api.client.get("/admin/budgets", headers=api.master)).json() == {"data": []}
