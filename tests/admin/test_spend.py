"""``GET /admin/spend`` through the real admin app: formats, scoping by role, refusals."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from admin.conftest import Api
from fairgate.accounting import StoreUsageWriter, UsageRecord

DAY = datetime(2025, 10, 1, tzinfo=UTC)
PERIOD = {"from": "2025-10-01", "to": "2025-10-02"}


async def seed(api: Api) -> list[UsageRecord]:
    keys = api.world.keys
    places = [("a1", "A", "a1"), ("mia", "A", "a1"), ("a2", "A", "a2"), ("b1", "B", "b1")]
    records = [
        UsageRecord(
            request_id=f"r-{label}-{i}",
            at=DAY + timedelta(hours=i),
            key_id=keys[label],
            org=org,
            team=team,
            model="llama-70b",
            tags=("eval",) if i % 2 else (),
            prompt_tokens=100 * (i + 1),
            completion_tokens=10,
            cost_micro=1_500_000 + i,
        )
        for label, org, team in places
        for i in range(3)
    ]
    assert await StoreUsageWriter(api.tenancy.store).write(records) == len(records)
    return records


async def test_json_is_the_default_and_sums_the_period(api: Api) -> None:
    records = await seed(api)
    response = await api.client.get("/admin/spend", params=PERIOD, headers=api.master)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["group_by"] == ["org", "team"]
    assert [(r["org"], r["team"], r["requests"]) for r in body["data"]] == [
        ("A", "a1", 6),
        ("A", "a2", 3),
        ("B", "b1", 3),
    ]
    assert body["total"]["cost_micro"] == sum(r.cost_micro for r in records)
    assert body["total"]["gpu_hours"] == "18.000012"


async def test_csv_and_parsable2_carry_the_same_rows(api: Api) -> None:
    await seed(api)
    params = {**PERIOD, "group_by": "team,tag"}
    as_csv = await api.client.get(
        "/admin/spend", params={**params, "format": "csv"}, headers=api.master
    )
    as_p2 = await api.client.get(
        "/admin/spend", params={**params, "format": "parsable2"}, headers=api.master
    )
    assert as_csv.headers["content-type"].startswith("text/csv")
    assert as_p2.headers["content-type"].startswith("text/plain")
    csv_lines = as_csv.text.splitlines()
    assert csv_lines[0] == (
        "team,tag,requests,prompt_tokens,completion_tokens,cached_tokens,gpu_hours,"
        "estimated_requests"
    )
    assert [line.replace(",", "|") for line in csv_lines] == as_p2.text.splitlines()
    assert "a1||4|" in as_p2.text and "a1|eval|2|" in as_p2.text


async def test_each_caller_sees_only_the_spend_it_may_read(api: Api) -> None:
    await seed(api)
    expected = {
        "pat": {"A": 9, "B": 3},
        "olga": {"A": 9},
        "bob": {"B": 3},
        "tom": {"A": 6},
        "val": {"A": 6},
        "mia": {"A": 3},
        "ua": {},
    }
    for user, orgs in expected.items():
        response = await api.client.get(
            "/admin/spend", params={**PERIOD, "group_by": "org"}, headers=api.as_user(user)
        )
        assert response.status_code == 200, user
        got = {r["org"]: r["requests"] for r in response.json()["data"]}
        assert got == orgs, user


async def test_filters_narrow_the_records(api: Api) -> None:
    await seed(api)
    response = await api.client.get(
        "/admin/spend",
        params={**PERIOD, "group_by": "", "team": "a1", "tag": "eval"},
        headers=api.master,
    )
    assert response.json()["data"] == [response.json()["total"]]
    assert response.json()["total"]["requests"] == 2


async def test_bad_questions_get_400_envelopes_and_no_credential_gets_401(api: Api) -> None:
    cases = [
        ({"to": "2025-10-02"}, "invalid_request"),
        ({**PERIOD, "from": "2025-10-32"}, "invalid_date"),
        ({**PERIOD, "to": "2025-09-30"}, "invalid_range"),
        ({**PERIOD, "group_by": "org,weather"}, "invalid_group_by"),
        ({**PERIOD, "format": "xlsx"}, "invalid_format"),
    ]
    for params, code in cases:
        response = await api.client.get("/admin/spend", params=params, headers=api.master)
        assert response.status_code == 400, params
        assert response.json()["error"]["code"] == code, params
    anonymous = await api.client.get("/admin/spend", params=PERIOD)
    assert anonymous.status_code == 401


async def test_the_route_is_in_the_openapi_document(api: Api) -> None:
    paths = (await api.client.get("/admin/openapi.json", headers=api.master)).json()["paths"]
    params = {p["name"] for p in paths["/admin/spend"]["get"]["parameters"]}
    assert {"from", "to", "group_by", "format", "tag"} <= params
