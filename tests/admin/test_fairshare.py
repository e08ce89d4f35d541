"""``GET /admin/fairshare`` through the real admin app, over the memory and the Redis state.

The tree is tests/tenancy/world.py: organisations A (share 0.6), B (0.4) and C
(no share). Pool b300 (C = 10) reserves A 6 and B 4; pool h100 (C = 4) has no
shares. Claims and charges go straight to the state back end, as the proxy's
fair-share stage makes them.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from admin.conftest import MASTER_KEY, MODELS, admin_guard, make_client
from fairgate.admin import build_admin_app
from fairgate.admin.fairshare import FairShareMonitor
from fairgate.auth.secrets import sha256
from fairgate.fairshare import FairShare, PriorityClass
from fairgate.limits import Claim, FairShareState
from fairgate.limits.fairshare_state import Split
from fairgate.state import MemoryCounterStore, RedisCounterStore
from fairgate.state.board import RedisInFlightBoard
from fairgate.store import Store
from fairgate.tenancy import Tenancy
from redis_keys import delete_prefix
from store.backends import FakeClock
from tenancy.world import World, build_world

HOUR = 3600.0
HALF_LIFE = 168 * HOUR
POLICY = FairShare({"b300": 10, "h100": 4}, {"b300": {"A": 0.6, "B": 0.4}}, half_life=HALF_LIFE)


@dataclass
class FairShareApi:
    client: Any
    world: World
    clock: FakeClock
    state: FairShareState
    local: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)

    def as_user(self, user: str) -> dict[str, str]:
        return {"authorization": f"Bearer {self.world.tokens[user]}"}

    @property
    def master(self) -> dict[str, str]:
        return {"authorization": f"Bearer {MASTER_KEY}"}

    async def get(self, headers: dict[str, str], **params: str) -> Any:
        response = await self.client.get("/admin/fairshare", headers=headers, params=params)
        assert response.status_code == 200, response.text
        assert "Infinity" not in response.text and "NaN" not in response.text
        return response.json()

    async def claims(self, pool: str, org: str, n: int) -> list[Claim]:
        reservation = POLICY.reservations(pool).get(org, 0)
        return [await self.state.claim(pool, org, reservation, self.clock.now) for _ in range(n)]


@asynccontextmanager
async def open_api(
    store: Store,
    state: FairShareState,
    policy: FairShare = POLICY,
    board: Callable[[Callable[[], dict[tuple[str, str], tuple[int, int]]]], Any] | None = None,
) -> AsyncIterator[FairShareApi]:
    """The admin API over ``state``; ``board(local)`` makes the fleet's in-flight board."""
    clock = FakeClock()
    tenancy = Tenancy(store, clock=clock, models=MODELS)
    world = await build_world(tenancy)
    local: dict[tuple[str, str], tuple[int, int]] = {}
    fleet = None if board is None else board(lambda: local)
    app = build_admin_app(
        tenancy=tenancy,
        master_key_sha256=sha256(MASTER_KEY),
        guard=admin_guard(clock),
        registry=CollectorRegistry(),
        models_ready=lambda: {"llama-70b": True},
        draining=lambda: False,
        fairshare=FairShareMonitor(
            policy,
            state,
            clock,
            lambda: local,
            fleet=None if fleet is None else fleet.totals,
            gateways=lambda: 1 if fleet is None else fleet.gateways,
        ),
    )
    async with make_client(app) as client:
        yield FairShareApi(client, world, clock, state, local)


@asynccontextmanager
async def redis_state(url: str) -> AsyncIterator[Callable[[], RedisCounterStore]]:
    """Gateways on the shared Redis under one fresh prefix; every key deleted afterwards."""
    prefix = f"fgtest:{uuid.uuid4().hex}:"
    made: list[RedisCounterStore] = []

    def make() -> RedisCounterStore:
        made.append(RedisCounterStore(url, prefix=prefix, timeout=5.0))  # the machine is shared
        return made[-1]

    try:
        yield make
    finally:
        for gateway in made:
            await gateway.aclose()
        await delete_prefix(url, prefix)


@pytest.fixture
async def api(store: Store) -> AsyncIterator[FairShareApi]:
    async with open_api(store, MemoryCounterStore()) as opened:
        yield opened


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def state_api(store: Store, request: pytest.FixtureRequest) -> AsyncIterator[FairShareApi]:
    if request.param == "memory":
        async with open_api(store, MemoryCounterStore()) as opened:
            yield opened
        return
    async with (
        redis_state(request.getfixturevalue("redis_url")) as make,
        open_api(store, make()) as opened,
    ):
        yield opened


TEAM_POLICY = FairShare(
    {"b300": 10},
    {"b300": {"A": 0.6, "B": 0.4}},
    half_life=HALF_LIFE,
    team_shares={"A": {"research": 0.7, "ops": 0.3}},
)


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def team_api(store: Store, request: pytest.FixtureRequest) -> AsyncIterator[FairShareApi]:
    if request.param == "memory":
        async with open_api(store, MemoryCounterStore(), TEAM_POLICY) as opened:
            yield opened
        return
    async with (
        redis_state(request.getfixturevalue("redis_url")) as make,
        open_api(store, make(), TEAM_POLICY) as opened,
    ):
        yield opened


async def test_each_organisation_row_shows_its_teams(team_api: FairShareApi) -> None:
    api, now = team_api, team_api.clock.now
    # A's reservation 6 splits research 4 (4.2) / ops 2 (1.8); research holds 5: 4 + 1 of
    # ops' idle seats
    groups = ("research", "ops")
    for _ in range(5):
        await api.state.claim("b300", "A", 6, now, Split("research", 4, groups), "research")
    await api.state.claim("b300", "B", 4, now, None, "bees")
    await api.state.charge("b300", "A", 3.0, now, HALF_LIFE, team="research")
    await api.state.charge("b300", "A", 1.0, now, HALF_LIFE, team="misc")  # no share

    b300 = rows(await api.get(api.master), "b300")
    assert b300["A"]["within_share_in_flight"] == 5
    assert b300["A"]["teams"] == [
        {
            "team": "ops",
            "share": 0.3,
            "reservation": 2,
            "within_share_in_flight": 0,
            "usage": 0.0,
            "level": None,
            "rank": 0,
        },
        {
            "team": "research",
            "share": 0.7,
            "reservation": 4,
            "within_share_in_flight": 5,
            "usage": pytest.approx(3.0),
            "level": pytest.approx(0.7 / 0.75),
            "rank": 1,
        },
        {
            "team": "misc",
            "share": None,
            "reservation": 0,  # the rest of A's 6 seats: none
            "within_share_in_flight": 0,
            "usage": pytest.approx(1.0),
            "level": 0.0,  # the rest has no share of A
            "rank": 2,
        },
    ]
    # an organisation without team shares lists its teams with usage or slots in flight
    assert b300["B"]["teams"] == [
        {
            "team": "bees",
            "share": None,
            "reservation": 4,
            "within_share_in_flight": 1,
            "usage": 0.0,
            "level": None,
            "rank": 0,
        }
    ]


def rows(body: Any, pool: str) -> dict[str, dict[str, Any]]:
    (found,) = [p for p in body["pools"] if p["pool"] == pool]
    return {row["org"]: row for row in found["orgs"]}


async def test_the_numbers_follow_claims_charges_and_time(state_api: FairShareApi) -> None:
    api = state_api
    a = await api.claims("b300", "A", 8)  # six within share, two borrowing
    b = await api.claims("b300", "B", 1)
    await api.state.charge("b300", "A", 90.0, api.clock.now, HALF_LIFE)
    await api.state.charge("b300", "B", 10.0, api.clock.now, HALF_LIFE)
    api.local.update({("b300", "A"): (6, 2), ("b300", "B"): (1, 0), ("h100", "C"): (0, 3)})

    body = await api.get(api.master)
    assert body["object"] == "fairshare" and body["at"] == api.clock.now
    assert body["half_life_seconds"] == HALF_LIFE
    assert [(p["pool"], p["capacity"]) for p in body["pools"]] == [("b300", 10), ("h100", 4)]
    b300 = rows(body, "b300")
    assert [row["org"] for row in rows(body, "b300").values()] == ["B", "A"]  # by rank
    assert b300["A"]["share"] == 0.6 and b300["A"]["reservation"] == 6
    assert b300["A"]["within_share_in_flight"] == 6
    assert b300["A"]["usage"] == pytest.approx(90.0, rel=1e-12)
    assert b300["A"]["level"] == pytest.approx(0.6 / 0.9, rel=1e-12)
    assert b300["A"]["this_gateway"] == {
        "within_share_in_flight": 6,
        "borrowing_in_flight": 2,
        "borrowed_fraction": 0.25,
    }
    assert (b300["B"]["reservation"], b300["B"]["within_share_in_flight"]) == (4, 1)
    assert b300["B"]["level"] == pytest.approx(0.4 / 0.1, rel=1e-12)
    assert (b300["B"]["rank"], b300["A"]["rank"]) == (0, 1)
    # the rank shown is the one a borrowing request gets now
    usage = {"A": 90.0, "B": 10.0}
    assert POLICY.decide("b300", "A", PriorityClass.BATCH, 6, usage).rank == b300["A"]["rank"]
    # an organisation that only borrows: no share, no usage, LF +inf shown as null
    assert rows(body, "h100") == {
        "C": {
            "org": "C",
            "share": 0.0,
            "reservation": 0,
            "within_share_in_flight": 0,
            "borrowing_in_flight": 3,
            "borrowed_fraction": 1.0,
            "usage": 0.0,
            "level": None,
            "rank": 0,
            "this_gateway": {
                "within_share_in_flight": 0,
                "borrowing_in_flight": 3,
                "borrowed_fraction": 1.0,
            },
            "teams": [],
        }
    }

    for claim in a[:4] + b:
        await api.state.release(claim)
    after = rows(await api.get(api.master), "b300")
    assert (after["A"]["within_share_in_flight"], after["B"]["within_share_in_flight"]) == (2, 0)
    api.clock.advance(HALF_LIFE)  # (Redis slots would expire by now: nobody refreshes them)
    later = rows(await api.get(api.master), "b300")
    assert later["A"]["usage"] == pytest.approx(45.0, rel=1e-9)
    assert later["B"]["usage"] == pytest.approx(5.0, rel=1e-9)
    assert later["A"]["level"] == pytest.approx(0.6 / 0.9, rel=1e-9)  # both halve: LF stays


async def test_without_usage_every_organisation_shares_rank_zero(api: FairShareApi) -> None:
    b300 = rows(await api.get(api.master), "b300")
    assert {org: (r["level"], r["rank"], r["usage"]) for org, r in b300.items()} == {
        "A": (None, 0, 0.0),
        "B": (None, 0, 0.0),
    }
    assert rows(await api.get(api.master), "h100") == {}  # nobody there, nothing reserved


@pytest.mark.redis
async def test_one_gateway_reports_the_slots_every_gateway_holds(
    store: Store, redis_url: str
) -> None:
    async with redis_state(redis_url) as make:
        here, elsewhere = make(), make()
        async with open_api(store, here) as api:
            await api.claims("b300", "A", 2)
            for _ in range(3):
                await elsewhere.claim("b300", "A", 6, api.clock.now)  # another gateway
            await elsewhere.claim("b300", "B", 4, api.clock.now)
            api.local[("b300", "A")] = (2, 0)
            b300 = rows(await api.get(api.master), "b300")
            assert b300["A"]["within_share_in_flight"] == 5
            assert b300["B"]["within_share_in_flight"] == 1
            assert b300["A"]["this_gateway"]["within_share_in_flight"] == 2
            assert b300["B"]["this_gateway"]["borrowed_fraction"] is None  # none here


@pytest.mark.redis
async def test_the_borrowing_counts_are_every_gateways(store: Store, redis_url: str) -> None:
    async with redis_state(redis_url) as make:
        here, elsewhere, dead = make(), make(), make()
        boards: list[RedisInFlightBoard] = []

        def board(local: Callable[[], dict[tuple[str, str], tuple[int, int]]]) -> Any:
            boards.append(RedisInFlightBoard(here, local))
            return boards[-1]

        async with open_api(store, here, board=board) as api:
            api.local.update({("b300", "A"): (2, 1)})
            other = RedisInFlightBoard(
                elsewhere, lambda: {("b300", "A"): (0, 4), ("h100", "C"): (0, 2)}
            )
            await other.publish()
            # a gateway that stopped publishing 10 s ago (killed): its requests are gone
            gone = RedisInFlightBoard(
                dead, lambda: {("b300", "A"): (0, 50)}, clock=lambda: time.time() - 10
            )
            await gone.publish()
            body = await api.get(api.master)
            assert body["gateways"] == 2
            b300 = rows(body, "b300")
            assert b300["A"]["borrowing_in_flight"] == 5  # 1 here, 4 there, none of the dead one
            assert b300["A"]["this_gateway"]["borrowing_in_flight"] == 1
            assert rows(body, "h100")["C"]["borrowing_in_flight"] == 2  # it borrows only there
            api.local.update({("b300", "A"): (2, 3)})  # this gateway's own counts are live
            assert rows(await api.get(api.master), "b300")["A"]["borrowing_in_flight"] == 7
            fields = await here.client.hkeys(f"{here.prefix}fairshare:gateways")
            assert gone.gateway.encode() not in fields  # the dead entry was dropped


@pytest.mark.parametrize(
    ("user", "orgs"),
    [
        ("alice", {"A", "B", "C"}),
        ("pat", {"A", "B", "C"}),
        ("olga", {"A"}),
        ("vic", {"A"}),
        ("bob", {"B"}),
    ],
)
async def test_each_reader_sees_the_organisations_it_may(
    api: FairShareApi, user: str, orgs: set[str]
) -> None:
    api.local[("b300", "C")] = (0, 1)
    body = await api.get(api.as_user(user))
    assert [p["pool"] for p in body["pools"]] == ["b300", "h100"]
    assert {org for p in body["pools"] for org in rows(body, p["pool"])} == orgs
    if orgs == {"A"}:  # an organisation admin gets its row in every pool, even without a share
        assert rows(body, "h100")["A"]["reservation"] == 0
        assert rows(body, "b300")["A"]["reservation"] == 6


@pytest.mark.parametrize("user", ["tom", "mia", "val", "ua"])
async def test_team_level_roles_are_refused(api: FairShareApi, user: str) -> None:
    response = await api.client.get("/admin/fairshare", headers=api.as_user(user))
    assert response.status_code == 403
    assert response.json()["error"]["type"] == "permission_error"


async def test_without_a_credential_it_is_401(api: FairShareApi) -> None:
    response = await api.client.get("/admin/fairshare")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_admin_credential"


async def test_one_pool_or_404(api: FairShareApi) -> None:
    body = await api.get(api.master, pool="h100")
    assert [p["pool"] for p in body["pools"]] == ["h100"]
    response = await api.client.get("/admin/fairshare", headers=api.master, params={"pool": "nope"})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "pool_not_found"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_state_down_is_a_503_envelope_without_the_url(store: Store) -> None:
    url = f"redis://:hunter2-secret@127.0.0.1:{free_port()}/0"
    down = RedisCounterStore(url, timeout=2.0)
    try:
        async with open_api(store, down) as api:
            response = await api.client.get("/admin/fairshare", headers=api.master)
            assert response.status_code == 503
            assert response.json()["error"] == {
                "message": "the fair-share state is unavailable; try again",
                "type": "service_unavailable",
                "code": "state_unavailable",
            }
            assert "hunter2" not in response.text and str(url) not in response.text
    finally:
        await down.aclose()


async def test_the_route_is_documented_and_absent_without_a_monitor(
    api: FairShareApi, store: Store
) -> None:
    spec = (await api.client.get("/admin/openapi.json", headers=api.master)).json()
    assert "get" in spec["paths"]["/admin/fairshare"]
    without = build_admin_app(
        tenancy=Tenancy(store, clock=api.clock, models=MODELS),
        master_key_sha256=sha256(MASTER_KEY),
        guard=admin_guard(api.clock),
        registry=CollectorRegistry(),
        models_ready=lambda: {},
        draining=lambda: False,
    )
    async with make_client(without) as client:
        response = await client.get("/admin/fairshare", headers=api.master)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "unknown_route"
