"""SCIM 2.0 provisioning end to end: scim2-client against a real gateway process.

- create a User, put them in a mapped Group: the role appears in the admin API; a hand-granted
  role on the same pair and another hand-granted role are not SCIM's and stay through all of it;
- a nested group's members get the outer group's role, and lose it when the nesting goes;
- ``active: false`` disables the user at once: their admin token gets 401 on the admin API and
  their dashboard session cookie is refused; SCIM's roles go, hand-granted ones stay;
- a PUT without ``active``, or a PATCH removing it, leaves the user as they were (never enabled);
- filters, paging, sorting, PATCH, ETags (a stale If-Match is 412), discovery, errors in SCIM's
  shape (404, 409 uniqueness, 400 bad filter);
- a wrong bearer token is a SCIM 401, counted in the admin listener's per-network limiter: past
  its limit both SCIM and the admin API answer 429, while the real token still works;
- at start-up, the state is reconciled: a SCIM-granted role removed by hand while the gateway was
  down is back; a mapped group naming an unknown team stops the start-up with one line.
"""

from __future__ import annotations

import secrets
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from scim2_client.engines.httpx2 import SyncSCIMClient
from scim2_models import (
    Group,
    GroupMember,
    ListResponse,
    PatchOp,
    PatchOperation,
    Resource,
    SearchRequest,
    User,
)
from tests.e2e.conftest import model, write_config

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess

pytestmark = pytest.mark.slow

MASTER = "a-master-key-for-the-scim-tests-only"
TOKEN = "scim-" + "t0ken" * 8
GROUPS = {
    "Lab T": {"team": "t", "role": "team_admin"},
    "Outer": {"team": "u", "role": "member"},
}


@dataclass
class Gateway:
    process: GatewayProcess
    config: Path

    @property
    def admin(self) -> str:
        return self.process.admin_url


def _config(directory: Path, sim: SimProcess, groups: dict[str, Any]) -> Path:
    (directory / "master.key").write_text(MASTER)
    (directory / "scim.token").write_text(TOKEN)
    return write_config(
        directory,
        [model("m", sim)],
        master_key_file="master.key",
        orgs=[{"name": "test-org", "share": 1.0, "teams": ["t", "u"]}],
        auth={"failures_per_minute": 8},
        scim={"token_file": "scim.token", "groups": groups, "max_results": 50},
    )


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with SimProcess("--model", "m", "--speed", "0") as running:
        yield running


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, sim: SimProcess) -> Iterator[Gateway]:
    config = _config(tmp_path_factory.mktemp("scim"), sim, GROUPS)
    with GatewayProcess(config, startup_timeout=120) as process:
        yield Gateway(process, config)


@contextmanager
def scim_client(gateway: Gateway, token: str = TOKEN) -> Iterator[SyncSCIMClient]:
    with httpx2.Client(
        base_url=gateway.admin + "/scim/v2", headers={"Authorization": f"Bearer {token}"}
    ) as http:
        client = SyncSCIMClient(http)
        client.discover()
        yield client


@pytest.fixture
def client(gateway: Gateway) -> Iterator[SyncSCIMClient]:
    with scim_client(gateway) as made:
        yield made


def admin(
    gateway: Gateway, method: str, path: str, token: str = MASTER, **kw: Any
) -> httpx.Response:
    headers = {"authorization": f"Bearer {token}", **kw.pop("headers", {})}
    return httpx.request(method, gateway.admin + path, headers=headers, timeout=30, **kw)


def roles(gateway: Gateway, user: str) -> set[tuple[str, str | None]]:
    answer = admin(gateway, "GET", f"/admin/users/{user}/roles")
    assert answer.status_code == 200, answer.text
    return {(b["role"], b["scope"]) for b in answer.json()["data"]}


def user_state(gateway: Gateway, name: str) -> dict[str, Any] | None:
    answer = admin(gateway, "GET", "/admin/users")
    assert answer.status_code == 200, answer.text
    return next((u for u in answer.json()["data"] if u["name"] == name), None)


def new_user(client: SyncSCIMClient, name: str, **fields: Any) -> User[Any]:
    created = client.create(User(user_name=name, active=True, **fields))
    assert isinstance(created, Resource) and created.user_name == name, created
    return created


def dashboard_session(gateway: Gateway, token: str) -> str:
    """The cookie value of an admin web session opened with ``token`` through the form."""
    answer = httpx.post(gateway.admin + "/admin/signin", data={"secret": token}, timeout=30)
    assert answer.status_code == 303, answer.text
    cookie = answer.headers["set-cookie"].split(";", 1)[0]
    return cookie


def dashboard(gateway: Gateway, cookie: str) -> httpx.Response:
    return httpx.get(gateway.admin + "/admin/dashboard", headers={"cookie": cookie}, timeout=30)


def test_create_member_role_then_inactive_kills_tokens_and_sessions(
    gateway: Gateway, client: SyncSCIMClient
) -> None:
    alice = new_user(client, "alice")
    assert user_state(gateway, "alice") is not None
    # Hand-granted: a viewer role on the organisation (opens the dashboard), and the very
    # pair group "Outer" maps, granted before SCIM would.
    for grant in ({"role": "viewer", "org": "test-org"}, {"role": "member", "team": "u"}):
        assert admin(gateway, "POST", "/admin/users/alice/roles", json=grant).status_code == 201
    token = admin(gateway, "POST", "/admin/admin-tokens", json={"user": "alice"})
    assert token.status_code == 201, token.text
    secret = token.json()["secret"]

    lab = client.create(Group(display_name="Lab T", members=[GroupMember(value=alice.id)]))
    assert isinstance(lab, Resource)
    client.create(Group(display_name="Outer", members=[GroupMember(value=alice.id)]))
    assert roles(gateway, "alice") == {
        ("viewer", "test-org"),
        ("member", "u"),
        ("team_admin", "t"),
    }
    whoami = admin(gateway, "GET", "/admin/whoami", token=secret)
    assert (
        whoami.status_code == 200
        and {"role": "team_admin", "scope": "team:t"} in whoami.json()["roles"]
    )
    cookie = dashboard_session(gateway, secret)
    assert dashboard(gateway, cookie).status_code == 200

    patch = PatchOp[User](
        operations=[PatchOperation(op=PatchOperation.Op.replace_, path="active", value=False)]
    )
    client.modify(User, alice.id, patch)

    assert admin(gateway, "GET", "/admin/whoami", token=secret).status_code == 401
    refused = dashboard(gateway, cookie)
    assert refused.status_code == 303 and refused.headers["location"] == "/admin/signin"
    state = user_state(gateway, "alice")
    assert state is not None and state["disabled_at"] is not None
    # SCIM's team_admin is gone; both hand-granted roles stay, the same pair included.
    assert roles(gateway, "alice") == {("viewer", "test-org"), ("member", "u")}
    # A new token cannot bring the user back: the user is disabled.
    again = admin(gateway, "POST", "/admin/admin-tokens", json={"user": "alice"})
    assert again.status_code in (403, 404, 409), again.text


def test_a_put_without_active_or_a_patch_removing_it_leaves_a_deactivated_user_disabled(
    gateway: Gateway,
) -> None:
    """RFC 7644 §3.5.1 leaves an omitted attribute to the provider: ``active`` absent is no
    change (never "active"), so a provider that drops it cannot re-enable a user it or an
    administrator deactivated; saying ``active: true`` still enables."""
    scim = gateway.admin + "/scim/v2/Users"
    schema = {"schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"]}
    auth = {"authorization": f"Bearer {TOKEN}"}

    def call(method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        answer = httpx.request(method, scim + path, headers=auth, json=body, timeout=30)
        assert answer.status_code in (200, 201), answer.text
        made: dict[str, Any] = answer.json()
        return made

    def disabled() -> bool:
        state = user_state(gateway, "dora")
        assert state is not None
        return state["disabled_at"] is not None

    dora = call("POST", "", {**schema, "userName": "dora"})  # created without active: active
    assert not disabled()
    path = f"/{dora['id']}"
    call("PUT", path, {**schema, "userName": "dora", "active": False})
    assert disabled()
    put = call("PUT", path, {**schema, "userName": "dora", "displayName": "Dora"})
    assert disabled() and put["active"] is False
    remove = {
        "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
        "Operations": [{"op": "remove", "path": "active"}],
    }
    patched = httpx.patch(scim + path, headers=auth, json=remove, timeout=30)
    assert patched.status_code in (200, 204), patched.text
    assert disabled()
    call("PUT", path, {**schema, "userName": "dora", "active": True})
    assert not disabled()
    # and the other way: absent keeps an active user active
    call("PUT", path, {**schema, "userName": "dora"})
    assert not disabled()


def test_nested_groups_are_expanded(gateway: Gateway, client: SyncSCIMClient) -> None:
    bob = new_user(client, "bob")
    inner = client.create(Group(display_name="Inner", members=[GroupMember(value=bob.id)]))
    assert isinstance(inner, Resource)
    found = client.query(Group, query_parameters=SearchRequest(filter='displayName eq "outer"'))
    assert isinstance(found, ListResponse) and found.total_results == 1
    outer = found.resources[0]
    add = PatchOp[Group](
        operations=[
            PatchOperation(op=PatchOperation.Op.add, path="members", value=[{"value": inner.id}])
        ]
    )
    client.modify(Group, outer.id, add)
    assert ("member", "u") in roles(gateway, "bob")

    remove = PatchOp[Group](
        operations=[
            PatchOperation(op=PatchOperation.Op.remove, path=f'members[value eq "{inner.id}"]')
        ]
    )
    client.modify(Group, outer.id, remove)
    assert ("member", "u") not in roles(gateway, "bob")
    # Deleting the user disables it too.
    client.delete(User, bob.id)
    state = user_state(gateway, "bob")
    assert state is not None and state["disabled_at"] is not None


def test_filters_paging_etags_and_errors(
    gateway: Gateway, client: SyncSCIMClient, request: pytest.FixtureRequest
) -> None:
    for n in range(3):
        new_user(client, f"page-{n}", display_name=f"Page {n}")
    page = client.query(
        User,
        query_parameters=SearchRequest(
            filter='userName sw "page-"', sort_by="userName", start_index=2, count=1
        ),
    )
    assert isinstance(page, ListResponse)
    assert page.total_results == 3 and page.start_index == 2
    assert [u.user_name for u in page.resources] == ["page-1"]

    http = httpx.Client(
        base_url=gateway.admin + "/scim/v2", headers={"authorization": f"Bearer {TOKEN}"}
    )
    request.addfinalizer(http.close)
    one = http.get("/Users", params={"filter": 'userName eq "PAGE-0"'}).json()
    assert one["totalResults"] == 1  # userName compares without case
    user_id = one["Resources"][0]["id"]
    got = http.get(f"/Users/{user_id}")
    etag = got.headers["etag"]
    assert got.json()["meta"]["version"] == etag
    assert got.json()["meta"]["location"] == f"{gateway.admin}/scim/v2/Users/{user_id}"
    assert http.get(f"/Users/{user_id}", headers={"if-none-match": etag}).status_code == 304
    body = {
        "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
        "Operations": [{"op": "replace", "path": "displayName", "value": "P0"}],
    }
    changed = http.patch(f"/Users/{user_id}", json=body, headers={"if-match": etag})
    assert changed.status_code in (200, 204)
    assert http.get(f"/Users/{user_id}").headers["etag"] != etag
    stale = http.patch(f"/Users/{user_id}", json=body, headers={"if-match": etag})
    assert stale.status_code == 412

    error = "urn:ietf:params:scim:api:messages:2.0:Error"
    missing = http.get("/Users/nobody")
    assert missing.status_code == 404 and missing.json()["schemas"] == [error]
    duplicate = http.post(
        "/Users",
        json={"schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"], "userName": "Page-1"},
    )
    assert duplicate.status_code == 409 and duplicate.json()["scimType"] == "uniqueness"
    bad_filter = http.get("/Users", params={"filter": "userName eq"})
    assert bad_filter.status_code == 400 and bad_filter.json()["scimType"] == "invalidFilter"
    bad_name = http.post(
        "/Users",
        json={"schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"], "userName": "a/b"},
    )
    assert bad_name.status_code == 400 and bad_name.json()["scimType"] == "invalidValue"
    with_password = http.post(
        "/Users",
        json={
            "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"],
            "userName": "pw",
            "password": "never-kept-secret",
        },
    )
    assert with_password.status_code == 201
    assert b"never-kept-secret" not in Path(gateway.config.parent / "fairgate.db").read_bytes()
    # a body over the admin listener's 64 KiB: refused before SCIM reads it, in SCIM's shape
    too_large = http.post(
        "/Users",
        json={
            "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"],
            "userName": "fat",
            "displayName": "x" * 70_000,
        },
    )
    assert too_large.status_code == 413
    assert too_large.headers["content-type"] == "application/scim+json"
    assert too_large.json()["schemas"] == [error] and too_large.json()["status"] == "413"
    # a page past anything SQL's OFFSET holds: empty, not a 500
    far = http.get("/Users", params={"startIndex": str(10**20)})
    assert far.status_code == 200, far.text
    assert far.json()["totalResults"] >= 1 and far.json().get("Resources", []) == []

    discovery = http.get("/ServiceProviderConfig").json()
    assert discovery["patch"]["supported"] and discovery["etag"]["supported"]
    assert discovery["bulk"]["supported"] is False
    assert {r["name"] for r in http.get("/ResourceTypes").json()["Resources"]} == {"User", "Group"}
    assert http.get("/Schemas").json()["totalResults"] >= 2


def _metric(gateway: Gateway, name: str) -> float:
    text = httpx.get(gateway.admin + "/metrics", timeout=30).text
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_wrong_token_is_refused_and_counted_in_the_network_limiter(gateway: Gateway) -> None:
    wrong = "scim-" + secrets.token_urlsafe(32)
    before = _metric(gateway, 'fairgate_scim_requests_refused_total{reason="bad_token"}')
    statuses = []
    for _ in range(12):
        answer = httpx.get(
            gateway.admin + "/scim/v2/Users", headers={"authorization": f"Bearer {wrong}"}
        )
        assert answer.json()["schemas"] == ["urn:ietf:params:scim:api:messages:2.0:Error"]
        statuses.append(answer.status_code)
    assert statuses[0] == 401 and statuses[-1] == 429, statuses
    assert TOKEN not in answer.text and wrong not in answer.text
    after = _metric(gateway, 'fairgate_scim_requests_refused_total{reason="bad_token"}')
    assert after - before == statuses.count(401)
    assert httpx.get(gateway.admin + "/scim/v2/Users").status_code == 429  # no token at all
    # One limiter for the listener: the admin API is refused from this network too...
    assert admin(gateway, "GET", "/admin/whoami", token="fga-" + "x" * 43).status_code == 429
    # ...while the provider's real token (and the master key) are never locked out.
    with scim_client(gateway) as client:
        assert isinstance(client.query(User), ListResponse)
    assert admin(gateway, "GET", "/admin/whoami").status_code == 200


def test_start_up_reconciles_and_refuses_an_unknown_team(tmp_path: Path, sim: SimProcess) -> None:
    config = _config(tmp_path, sim, GROUPS)
    with GatewayProcess(config, startup_timeout=120) as process:
        gw = Gateway(process, config)
        with scim_client(gw) as client:
            carol = new_user(client, "carol")
            client.create(Group(display_name="lab t", members=[GroupMember(value=carol.id)]))
        assert ("team_admin", "t") in roles(gw, "carol")
    # While the gateway is down the binding goes (a half-done change, a hand edit).
    with sqlite3.connect(tmp_path / "fairgate.db") as db:
        db.execute("DELETE FROM role_bindings WHERE role = 'team_admin'")
    with GatewayProcess(config, startup_timeout=120) as process:
        assert ("team_admin", "t") in roles(Gateway(process, config), "carol")

    (tmp_path / "broken").mkdir()
    broken = _config(tmp_path / "broken", sim, {"Ghosts": {"team": "nowhere"}})
    done = subprocess.run(
        [sys.executable, "-m", "fairgate", "serve", "-c", str(broken)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode != 0
    assert "scim.groups 'ghosts' names team 'nowhere'" in done.stderr
