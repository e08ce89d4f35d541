"""The admin listener's door: route classes by network, the metrics token, trusted proxies.

Each request is sent from a chosen client address (the ASGI scope's, as the
listener reports the connection's peer) and, where it matters, with an
``X-Forwarded-For`` a client forged.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter

from admin.conftest import MASTER_KEY, MODELS, admin_guard, make_client
from fairgate.admin import build_admin_app
from fairgate.auth.secrets import sha256
from fairgate.core.cidr import NetworkSet, parse_network
from fairgate.core.client_addr import ClientAddresses
from fairgate.core.route_classes import LOOPBACK, RouteClass, RouteRules
from fairgate.store import Store
from fairgate.tenancy import Actor, Tenancy
from store.backends import FakeClock

METRICS_TOKEN = "metrics-token-for-tests-0123456789"
PROXY = "10.0.0.5"
FORBIDDEN = {"error": {"message": "forbidden", "type": "permission_error", "code": "forbidden"}}


def networks(*cidrs: str) -> NetworkSet:
    return NetworkSet(parse_network(c) for c in cidrs)


@dataclass
class Door:
    tenancy: Tenancy
    app: object

    def client(self, addr: str) -> httpx.AsyncClient:
        return make_client(self.app, addr)


@pytest.fixture
async def door_factory(store: Store) -> AsyncIterator[Callable[..., Door]]:
    clock = FakeClock()
    tenancy = Tenancy(store, clock=clock, models=MODELS)

    def build(allow: dict[RouteClass, NetworkSet] | None = None, token: str | None = None) -> Door:
        rules = {"metrics": networks(*LOOPBACK), "health": networks(*LOOPBACK)}
        rules.update(allow or {})
        registry = CollectorRegistry()
        Counter("fairgate_door_test", "a metric to see", registry=registry).inc()
        app = build_admin_app(
            tenancy=tenancy,
            master_key_sha256=sha256(MASTER_KEY),
            guard=admin_guard(clock, failures_per_minute=3),
            registry=registry,
            models_ready=lambda: {"m": True},
            draining=lambda: False,
            clients=ClientAddresses(networks("10.0.0.0/24")),
            rules=RouteRules(rules),
            metrics_token_sha256=sha256(token) if token else None,
        )
        return Door(tenancy, app)

    yield build


MASTER = {"authorization": f"Bearer {MASTER_KEY}"}


def refused(response: httpx.Response) -> bool:
    """A 403 that says nothing about which rule, class or network refused it."""
    return (
        response.status_code == 403
        and response.json() == FORBIDDEN
        and not any(w in response.text for w in ("metrics", "health", "allow", "127.", "10."))
    )


async def test_metrics_and_health_answer_loopback_only_by_default(
    door_factory: Callable[..., Door],
) -> None:
    door = door_factory()
    async with door.client("127.0.0.1") as local, door.client("192.0.2.9") as remote:
        for path in ("/metrics", "/healthz", "/readyz"):
            assert (await local.get(path)).status_code == 200, path
            assert refused(await remote.get(path)), path
        async with door.client("::1") as v6:
            assert (await v6.get("/metrics")).status_code == 200
        # the admin API itself is open to every network by default (it needs its credential)
        assert (await remote.get("/admin/whoami", headers=MASTER)).status_code == 200


async def test_a_forged_forwarded_for_opens_nothing(door_factory: Callable[..., Door]) -> None:
    door = door_factory()
    spoof = {"x-forwarded-for": "127.0.0.1"}
    async with door.client("192.0.2.9") as outsider:
        assert refused(await outsider.get("/metrics", headers=spoof))  # not a trusted proxy
    async with door.client(PROXY) as proxy:
        # behind the trusted proxy the client wrote the left entry, the proxy the right one
        forged = {"x-forwarded-for": "127.0.0.1, 192.0.2.9"}
        assert refused(await proxy.get("/healthz", headers=forged))
        # a proxy on loopback forwarding for a loopback client: that client is loopback
        assert (
            await proxy.get("/healthz", headers={"x-forwarded-for": "127.0.0.1"})
        ).status_code == 200


async def test_a_restricted_class_refuses_the_same_way_whatever_the_class(
    door_factory: Callable[..., Door],
) -> None:
    door = door_factory({"metrics": networks("127.0.0.1/32"), "admin": networks("192.0.2.0/24")})
    async with door.client("127.0.0.2") as other, door.client("198.51.100.1") as far:
        assert refused(await other.get("/metrics"))
        # a valid master key does not open a closed network, nor does an unknown path leak
        assert refused(await far.get("/admin/whoami", headers=MASTER))
        assert refused(await far.get("/admin/openapi.json", headers=MASTER))
        assert refused(await far.get("/admin/nope"))
        # refused before the body is read: a huge declared body changes nothing
        big = await far.post(
            "/admin/keys", headers={**MASTER, "content-length": "999999999"}, content=b"x"
        )
        assert refused(big)
    async with door.client("192.0.2.77") as near:
        assert (await near.get("/admin/whoami", headers=MASTER)).status_code == 200


async def test_the_metrics_token_opens_metrics_anywhere_and_a_wrong_one_is_a_failure(
    door_factory: Callable[..., Door],
) -> None:
    door = door_factory(token=METRICS_TOKEN)
    good = {"authorization": f"Bearer {METRICS_TOKEN}"}
    bad = {"authorization": "Bearer not-the-token"}
    async with door.client("192.0.2.9") as scraper, door.client("192.0.2.10") as neighbour:
        answer = await scraper.get("/metrics", headers=good)
        assert answer.status_code == 200 and "fairgate_door_test_total 1.0" in answer.text
        assert refused(await scraper.get("/metrics"))  # no token: the network rule
        assert refused(await scraper.get("/healthz", headers=good))  # metrics only
        codes = [(await scraper.get("/metrics", headers=bad)).status_code for _ in range(5)]
        assert codes == [401, 401, 401, 429, 429]  # counted by the admin failure limiter
        wrong = await scraper.get("/metrics", headers=bad)
        assert "not-the-token" not in wrong.text and METRICS_TOKEN not in wrong.text
        assert "retry-after" in wrong.headers
        # the right token is compared first: a locked-out network still scrapes
        assert (await scraper.get("/metrics", headers=good)).status_code == 200
        # and the failures were the scraper's network's, not its neighbour's
        assert (await neighbour.get("/metrics", headers=bad)).status_code == 401
    # each 401 wrote its auth.failed event, without the token; the 429s wrote none
    events = await door.tenancy.audit.list(Actor.operator("test"), action="auth.failed")
    assert sorted(e.remote or "" for e in events) == ["192.0.2.10"] + ["192.0.2.9"] * 3
    for event in events:
        assert "not-the-token" not in str(event) and METRICS_TOKEN not in str(event)
    async with door.client("127.0.0.1") as local:
        assert (await local.get("/metrics")).status_code == 200  # loopback needs no token
        # and an allowed network is served whatever bearer it sends (an admin tool's)
        assert (await local.get("/metrics", headers=bad)).status_code == 200
        assert (await local.get("/metrics", headers=MASTER)).status_code == 200


async def test_the_metrics_token_is_read_as_the_client_api_reads_a_key(
    door_factory: Callable[..., Door],
) -> None:
    """The scheme in any case, blanks around the credential; nothing else opens /metrics,
    and a header that carries no bearer credential is the network rule's 403, not a
    failure counted against the scraper."""
    door = door_factory(token=METRICS_TOKEN)
    async with door.client("192.0.2.9") as scraper:
        for spelled in (f"bearer {METRICS_TOKEN}", f"BEARER  {METRICS_TOKEN} \t"):
            answer = await scraper.get("/metrics", headers={"authorization": spelled})
            assert answer.status_code == 200, spelled
        for no_credential in ("Bearer ", "Bearer", f"Basic {METRICS_TOKEN}", METRICS_TOKEN):
            answer = await scraper.get("/metrics", headers={"authorization": no_credential})
            assert refused(answer), no_credential
        other_case = {"authorization": f"Bearer {METRICS_TOKEN.upper()}"}
        codes = [(await scraper.get("/metrics", headers=other_case)).status_code for _ in range(4)]
        assert codes == [401, 401, 401, 429]  # only these three failures were counted


async def test_failed_admin_logins_behind_a_proxy_lock_out_their_client_only(
    door_factory: Callable[..., Door],
) -> None:
    door = door_factory()
    bad = {"authorization": "Bearer wrong-master-key"}
    async with door.client(PROXY) as proxy:
        x = {**bad, "x-forwarded-for": "192.0.2.1"}
        y = {**bad, "x-forwarded-for": "192.0.2.2"}
        codes = [(await proxy.get("/admin/whoami", headers=x)).status_code for _ in range(4)]
        assert codes == [401, 401, 401, 429]
        assert (await proxy.get("/admin/whoami", headers=y)).status_code == 401
        # the client left of the proxy's entry cannot move its failures onto another
        spoof = {**bad, "x-forwarded-for": "192.0.2.2, 192.0.2.1"}
        assert (await proxy.get("/admin/whoami", headers=spoof)).status_code == 429
        # the master key is never locked out, also for the locked-out client
        ok = {**MASTER, "x-forwarded-for": "192.0.2.1"}
        assert (await proxy.get("/admin/whoami", headers=ok)).status_code == 200
    events = await door.tenancy.audit.list(Actor.operator("test"), action="auth.failed")
    assert {e.remote for e in events} == {"192.0.2.1", "192.0.2.2"}
