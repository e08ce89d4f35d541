"""Key limits against team limits through the admin API: who may set them, how high,
the team's totals, and how many keys one member may own.

Each test attacks one way a member could widen what the team was given: raising
their key's limits, a team admin setting a key above the team, and opening keys
without end (concurrently, so the bound must hold inside the store's transaction).
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from admin.conftest import Api
from fairgate.accounts import SsoBinding
from fairgate.admin.sso.actors import SsoActors
from fairgate.auth.secrets import sha256
from fairgate.core.errors import Forbidden
from fairgate.store import StoreKeyDirectory


def error(answer: httpx.Response) -> tuple[int, str, str]:
    body = answer.json()["error"]
    return answer.status_code, body["code"], body["message"]


async def key(api: Api, key_id: str) -> dict[str, Any]:
    answer = await api.client.get(f"/admin/keys/{key_id}", headers=api.as_user("tom"))
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


async def test_a_member_cannot_raise_or_clear_their_own_keys_limits(api: Api) -> None:
    mine = api.world.keys["mia"]
    tom = api.as_user("tom")
    assert (await api.client.patch(f"/admin/keys/{mine}", headers=tom, json={"rpm": 5})).is_success
    mia = api.as_user("mia")
    for change in ({"rpm": 1_000_000_000}, {"rpm": None}, {"max_in_flight": 1000}):
        answer = await api.client.patch(f"/admin/keys/{mine}", headers=mia, json=change)
        status, code, message = error(answer)
        assert (status, code) == (403, "forbidden"), answer.text
        assert "team_admin" in message
    assert (await key(api, mine))["rpm"] == 5 and (await key(api, mine))["max_in_flight"] is None
    created = await api.client.post(
        "/admin/keys", headers=mia, json={"team": "a1", "tpm": 1_000_000_000}
    )
    assert error(created)[:2] == (403, "forbidden")
    # her other changes still work: only the limits are an admin's
    narrowed = await api.client.patch(
        f"/admin/keys/{mine}", headers=mia, json={"models": ["llama-8b"]}
    )
    assert narrowed.status_code == 200, narrowed.text


async def test_a_team_admin_cannot_set_a_key_above_the_teams_per_key_limit(api: Api) -> None:
    olga, tom = api.as_user("olga"), api.as_user("tom")
    team = await api.client.patch("/admin/teams/a1", headers=olga, json={"rpm": 60, "tpm": 1000})
    assert team.status_code == 200 and team.json()["rpm"] == 60
    target = api.world.keys["a1"]
    raised = await api.client.patch(f"/admin/keys/{target}", headers=tom, json={"rpm": 61})
    assert error(raised) == (
        400,
        "limit_above_team",
        "rpm 61 is above team 'a1''s limit of 60 per key",
    )
    created = await api.client.post("/admin/keys", headers=tom, json={"team": "a1", "tpm": 1001})
    status, code, message = error(created)
    assert (status, code) == (400, "limit_above_team") and "tpm" in message and "1000" in message
    assert (await key(api, target))["rpm"] is None
    within = await api.client.patch(f"/admin/keys/{target}", headers=tom, json={"rpm": 60})
    assert within.status_code == 200 and within.json()["rpm"] == 60
    # even the proxy admin may not put a key above its team: raise the team instead
    alice = api.as_user("alice")
    above = await api.client.patch(f"/admin/keys/{target}", headers=alice, json={"rpm": 600})
    assert error(above)[:2] == (400, "limit_above_team")


async def test_a_team_lowered_below_its_keys_binds_them_at_once(api: Api) -> None:
    tom, olga = api.as_user("tom"), api.as_user("olga")
    created = await api.client.post("/admin/keys", headers=tom, json={"team": "a1", "rpm": 600})
    assert created.status_code == 201, created.text
    secret = created.json()["secret"]
    lowered = await api.client.patch("/admin/teams/a1", headers=olga, json={"rpm": 30})
    assert lowered.status_code == 200
    record = await StoreKeyDirectory(api.tenancy.store).find_key(sha256(secret), 0.0)
    assert record is not None and record.limits.rpm == 30  # the key's 600 stays stored, bound by 30


async def test_team_totals_are_set_by_org_admins_and_reach_the_key_directory(api: Api) -> None:
    body = {"total_rpm": 100, "total_tpm": 5000, "total_max_in_flight": 4}
    by_team_admin = await api.client.patch("/admin/teams/a1", headers=api.as_user("tom"), json=body)
    assert error(by_team_admin)[:2] == (403, "forbidden")
    answer = await api.client.patch("/admin/teams/a1", headers=api.as_user("olga"), json=body)
    assert answer.status_code == 200, answer.text
    team = answer.json()
    assert (team["total_rpm"], team["total_tpm"], team["total_rpd"]) == (100, 5000, None)
    assert team["max_keys_per_member"] == 10
    created = await api.client.post("/admin/keys", headers=api.as_user("tom"), json={"team": "a1"})
    record = await StoreKeyDirectory(api.tenancy.store).find_key(
        sha256(created.json()["secret"]), 0.0
    )
    assert record is not None
    totals = record.team_limits
    assert (totals.rpm, totals.tpm, totals.max_in_flight) == (100, 5000, 4)
    too_many = await api.client.patch(
        "/admin/teams/a1", headers=api.as_user("olga"), json={"total_rpm": 0}
    )
    assert too_many.status_code == 400


async def test_a_member_cannot_open_more_keys_than_the_team_allows_even_all_at_once(
    api: Api,
) -> None:
    mia = api.as_user("mia")  # she owns one key in a1 already (the world's)

    async def create() -> httpx.Response:
        return await api.client.post("/admin/keys", headers=mia, json={"team": "a1"})

    answers = await asyncio.gather(*(create() for _ in range(14)))
    statuses = sorted(answer.status_code for answer in answers)
    assert statuses == [201] * 9 + [409] * 5, statuses  # 10 in all, the default
    refused = next(answer for answer in answers if answer.status_code == 409)
    status, code, message = error(refused)
    assert status == 409
    assert code == "too_many_keys" and "10 live keys" in message
    # another member's allowance is their own
    assert (
        await api.client.post("/admin/keys", headers=api.as_user("mo"), json={"team": "a1"})
    ).status_code == 201
    # a revoked key frees its place; the eleventh is refused again after that
    one = next(answer.json()["id"] for answer in answers if answer.status_code == 201)
    assert (await api.client.delete(f"/admin/keys/{one}", headers=mia)).status_code == 200
    assert (await create()).status_code == 201
    assert (await create()).status_code == 409


async def test_max_keys_per_member_is_the_teams_to_set(api: Api) -> None:
    olga = api.as_user("olga")
    answer = await api.client.patch(
        "/admin/teams/a1", headers=olga, json={"max_keys_per_member": 2}
    )
    assert answer.status_code == 200 and answer.json()["max_keys_per_member"] == 2
    mia = api.as_user("mia")
    first = await api.client.post("/admin/keys", headers=mia, json={"team": "a1"})
    second = await api.client.post("/admin/keys", headers=mia, json={"team": "a1"})
    assert (first.status_code, second.status_code) == (201, 409)
    by_team_admin = await api.client.patch(
        "/admin/teams/a1", headers=api.as_user("tom"), json={"max_keys_per_member": 1000}
    )
    assert error(by_team_admin)[:2] == (403, "forbidden")
    for bad in (0, 1001, True):
        refused = await api.client.patch(
            "/admin/teams/a1", headers=olga, json={"max_keys_per_member": bad}
        )
        assert refused.status_code == 400, (bad, refused.text)
    created = await api.client.post(
        "/admin/teams", headers=olga, json={"org": "A", "name": "a9", "max_keys_per_member": 3}
    )
    assert created.status_code == 201 and created.json()["max_keys_per_member"] == 3


async def test_an_expired_key_brought_back_counts_toward_its_owners_keys_again(api: Api) -> None:
    """A member at the team's bound let two keys expire, made two new ones and then gave
    the expired ones a new expiry: four live keys where the team allows two."""
    olga, mia = api.as_user("olga"), api.as_user("mia")
    answer = await api.client.patch(
        "/admin/teams/a1", headers=olga, json={"max_keys_per_member": 3}
    )
    assert answer.status_code == 200
    # she owns one key in a1 already (the world's): two more that expire, then two new ones
    short = {"team": "a1", "expires_in": "1m"}
    expiring = [await api.client.post("/admin/keys", headers=mia, json=short) for _ in range(2)]
    assert [a.status_code for a in expiring] == [201, 201]
    api.clock.advance(120)
    for _ in range(2):
        assert (
            await api.client.post("/admin/keys", headers=mia, json={"team": "a1"})
        ).status_code == 201
    for old in expiring:
        revived = await api.client.patch(
            f"/admin/keys/{old.json()['id']}", headers=mia, json={"expires_in": None}
        )
        status, code, message = error(revived)
        assert (status, code) == (409, "too_many_keys")
        assert "3 live keys" in message
    # a team admin cannot bring one back past her bound either; a revoked key frees a place
    one = expiring[0].json()["id"]
    by_admin = await api.client.patch(
        f"/admin/keys/{one}", headers=api.as_user("tom"), json={"expires_in": "1h"}
    )
    assert error(by_admin)[:2] == (409, "too_many_keys")
    live = (await api.client.get("/admin/keys?team=a1", headers=mia)).json()
    newest = max((k for k in live["data"] if k.get("expires_at") is None), key=lambda k: k["id"])
    assert (await api.client.delete(f"/admin/keys/{newest['id']}", headers=mia)).status_code == 200
    assert (
        await api.client.patch(f"/admin/keys/{one}", headers=mia, json={"expires_in": None})
    ).status_code == 200


async def test_a_single_sign_on_member_without_a_store_user_opens_no_ownerless_keys(
    api: Api,
) -> None:
    """A person whose claims make them a member of a1, with no store user of their name
    (actor ``sso:NAME``), has nobody to own a key: one they created would escape the
    team's keys-per-member bound and their own sight (a member reads and revokes only
    the keys it owns). Creating one is refused; a team admin signed in the same way
    creates team keys, as the master key does."""
    store = api.tenancy.store
    member = await SsoActors(store).actor("ada", [SsoBinding(role="member", team="a1")])
    assert member is not None and member.user_id is None and member.member_teams
    with pytest.raises(Forbidden):
        await api.tenancy.keys.create(member, team="a1")
    assert not await api.tenancy.keys.may_create(member, "a1")
    admin = await SsoActors(store).actor("bea", [SsoBinding(role="team_admin", team="a1")])
    assert admin is not None
    made = await api.tenancy.keys.create(admin, team="a1")
    assert made.key.owner is None and made.key.created_by == "sso:bea"
