"""Keys through the admin API: created once with the secret, listed without, revoked, rotated."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import insert

from admin.conftest import Api
from fairgate.auth.secrets import sha256
from fairgate.store import StoreKeyDirectory
from fairgate.store.tables import keys as keys_table
from fairgate.tenancy import Actor

OPERATOR = Actor.operator("test")


async def test_create_shows_the_secret_once_and_listings_never_do(api: Api) -> None:
    body = {
        "team": "a1",
        "project": "p",
        "name": "ci",
        "models": ["llama70b"],
        "rpm": 60,
        "tags": ["batch"],
        "expires_in": "30d",
    }
    created = await api.client.post("/admin/keys", headers=api.as_user("tom"), json=body)
    assert created.status_code == 201
    key = created.json()
    secret = key["secret"]
    assert secret.startswith(key["prefix"]) and secret.startswith("fg-")
    assert (key["team"], key["org"], key["project"], key["owner"]) == ("a1", "A", "p", "tom")
    assert key["models"] == ["llama70b"] and key["rpm"] == 60 and key["tags"] == ["batch"]
    assert key["expires_at"].endswith("Z")
    listed = await api.client.get("/admin/keys", headers=api.as_user("tom"))
    one = await api.client.get(f"/admin/keys/{key['id']}", headers=api.as_user("tom"))
    for response in (listed, one):
        assert response.status_code == 200
        assert secret not in response.text and "secret" not in response.text
        assert "sha256" not in response.text
    assert key["id"] in {k["id"] for k in listed.json()["data"]}


async def test_revoke_then_rotate_through_the_api(api: Api) -> None:
    key_id = api.world.keys["mia"]
    rotated = await api.client.post(
        f"/admin/keys/{key_id}/rotate", headers=api.as_user("mia"), json={"grace_period": "1h"}
    )
    assert rotated.status_code == 200
    new = rotated.json()
    assert new["id"] == key_id and new["secret"].startswith("fg-")
    assert new["previous_until"] is not None
    revoked = await api.client.delete(f"/admin/keys/{key_id}", headers=api.as_user("mia"))
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    record = await StoreKeyDirectory(api.tenancy.store).find_key(sha256(new["secret"]), 0)
    assert record is not None and record.revoked_at is not None


async def test_patch_changes_only_the_fields_given(api: Api) -> None:
    key_id = api.world.keys["a1"]
    headers = api.as_user("tom")
    await api.client.patch(f"/admin/keys/{key_id}", headers=headers, json={"rpm": 10, "tpm": 500})
    changed = await api.client.patch(f"/admin/keys/{key_id}", headers=headers, json={"rpm": 20})
    assert changed.status_code == 200
    assert (changed.json()["rpm"], changed.json()["tpm"]) == (20, 500)
    cleared = await api.client.patch(f"/admin/keys/{key_id}", headers=headers, json={"models": []})
    assert cleared.json()["models"] == []


async def test_a_key_id_from_another_org_changes_nothing_and_answers_404(api: Api) -> None:
    """Two organisations: B's admin guesses (here: knows) a key id of A's and tries everything."""
    key_id = api.world.keys["a1"]
    directory = StoreKeyDirectory(api.tenancy.store)
    before = await api.tenancy.keys.get(OPERATOR, key_id)
    api.clock.advance(10)
    bob = api.as_user("bob")
    attempts = [
        api.client.delete(f"/admin/keys/{key_id}", headers=bob),
        api.client.post(f"/admin/keys/{key_id}/rotate", headers=bob, json={}),
        api.client.patch(f"/admin/keys/{key_id}", headers=bob, json={"rpm": 1}),
        api.client.get(f"/admin/keys/{key_id}", headers=bob),
    ]
    for attempt in attempts:
        response = await attempt
        assert response.status_code == 404, response.text
        assert response.json()["error"]["code"] == "key_not_found"
    after = await api.tenancy.keys.get(OPERATOR, key_id)
    assert after == before
    assert await directory.key_changes(api.clock.now - 5) == []


async def test_a_member_neither_sets_nor_drops_the_tags_of_its_own_key(api: Api) -> None:
    """A key's tags decide which tag budgets bind it: team admins and above set them."""
    tagged = await api.client.post(
        "/admin/keys", headers=api.as_user("tom"), json={"team": "a1", "tags": ["grant"]}
    )
    assert tagged.status_code == 201
    refused = await api.client.post(
        "/admin/keys", headers=api.as_user("mia"), json={"team": "a1", "tags": ["grant"]}
    )
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["type"] == "permission_error"
    assert refused.json()["error"]["code"] == "forbidden"
    own = api.world.keys["mia"]
    await api.tenancy.keys.update(OPERATOR, own, tags=["grant"])  # set from above
    for tags in ([], ["other"]):  # drop them (escape the budget) or change them
        answer = await api.client.patch(
            f"/admin/keys/{own}", headers=api.as_user("mia"), json={"tags": tags}
        )
        assert answer.status_code == 403, answer.text
        assert answer.json()["error"]["code"] == "forbidden"
    assert (await api.tenancy.keys.get(OPERATOR, own)).tags == ("grant",)
    # what a member may still change on its own key is unaffected
    renamed = await api.client.patch(
        f"/admin/keys/{own}", headers=api.as_user("mia"), json={"expires_in": "30d"}
    )
    assert renamed.status_code == 200, renamed.text
    # the team admin may drop them
    dropped = await api.client.patch(
        f"/admin/keys/{own}", headers=api.as_user("tom"), json={"tags": []}
    )
    assert dropped.status_code == 200 and dropped.json()["tags"] == []
    # another organisation's admin does not even see the key
    other = await api.client.patch(
        f"/admin/keys/{own}", headers=api.as_user("bob"), json={"tags": ["grant"]}
    )
    assert other.status_code == 404


async def test_a_budget_set_on_an_alias_answers_with_the_canonical_model(api: Api) -> None:
    body = {"scope": "team:a1", "period": "day", "max": "1", "model": "llama70b"}
    answer = await api.client.put("/admin/budgets", headers=api.as_user("olga"), json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["model"] == "llama-70b"
    unknown = await api.client.put(
        "/admin/budgets", headers=api.as_user("olga"), json={**body, "model": "llama-7b"}
    )
    assert unknown.status_code == 400
    assert unknown.json()["error"]["code"] == "model_not_found"


async def test_a_team_of_more_keys_than_a_page_is_listed_page_by_page(api: Api) -> None:
    """A listing answers at most ``limit`` keys (1000 by default) in id order; ``after``
    (the last id of a page) gives the next, so no key of a large team is out of sight."""
    team = await api.tenancy.teams.get(OPERATOR, "a2")
    now = datetime.now(UTC)
    extra = [
        {
            "id": f"01ZZ{n:022d}",
            "team_id": team.id,
            "prefix": "fg-test",
            "secret_sha256": sha256(f"extra-{n}"),
            "tags": [],
            "created_at": now,
            "created_by": "test",
            "changed_at": now,
        }
        for n in range(1000)
    ]
    async with api.tenancy.store.write() as conn:
        await conn.execute(insert(keys_table), extra)
    seen: list[str] = []
    after: str | None = None
    for _ in range(4):  # two pages and an empty one
        params = {"team": "a2", **({} if after is None else {"after": after})}
        page = await api.client.get("/admin/keys", headers=api.as_user("olga"), params=params)
        assert page.status_code == 200
        ids = [k["id"] for k in page.json()["data"]]
        if not ids:
            break
        assert len(ids) <= 1000 and ids == sorted(ids)
        seen += ids
        after = ids[-1]
    assert len(seen) == len(set(seen)) == 1001
    assert api.world.keys["a2"] in seen
    small = await api.client.get(
        "/admin/keys", headers=api.master, params={"team": "a2", "limit": 2, "after": seen[0]}
    )
    assert [k["id"] for k in small.json()["data"]] == seen[1:3]
    wrong = await api.client.get("/admin/keys", headers=api.master, params={"limit": 1001})
    assert wrong.status_code == 400 and wrong.json()["error"]["code"] == "invalid_request"
