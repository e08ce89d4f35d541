"""The route stage (``proxy.forward``): the ``Forwarder`` as the Gateway builds it, over a
real registry, relay and settler, its replicas simulated vLLM engines (``fairgate sim``).

The request arrives as the read stage leaves it (``EndpointTable.model_for``: the model
and its fallbacks); what the client gets is the ASGI messages the Forwarder sends. Each
test is something a client or an operator sees: a replica failing before any byte is
tried again elsewhere and its breaker told, a started answer never retried, a model
with no replica left falls back to the next of its chain, the answer names its request
and its fair-share standing, and when every try failed the client gets the engine's
own failed answer (or the gateway's 503 when no replica could be tried at all).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import orjson
import pytest
from tests.e2e.conftest import HEAVIEST_FIRST
from tests.proxy.asgi_client import Client

from fairgate.config import Model
from fairgate.core.breaker import Breaker
from fairgate.core.errors import ServiceUnavailable
from fairgate.engines import adapter_for
from fairgate.observability.metrics import GatewayMetrics
from fairgate.proxy.endpoints import EndpointTable, ModelEntry
from fairgate.proxy.exchange import Exchange, Outcome
from fairgate.proxy.forward import Forwarder
from fairgate.proxy.relay import Deadlines, Relay
from fairgate.proxy.reservation import Reservation, charge
from fairgate.proxy.settle import Settler
from fairgate.proxy.ticket import Ticket
from fairgate.routing import strategy_for
from fairgate.sim.process import SimProcess
from fairgate.upstream import Replica, ReplicaRegistry, UpstreamPool

CHAT = "/v1/chat/completions"
VLLM = adapter_for("vllm")
DEADLINES = Deadlines(
    connect=5,
    headers=5,
    first_token=5,
    idle=5,
    total=20,
    slow_reader=5,
    max_response_bytes=1 << 20,
)


def replica(name: str, engine: SimProcess, *, model: str = "m", weight: int = 1) -> Replica:
    """A replica of ``model`` on ``engine``; its breaker opens at the third failure in a
    row (the configuration's default), for an hour."""
    breaker = Breaker(failures=3, backoff_initial=3600.0, backoff_max=3600.0)
    return Replica(name, model, engine.url, weight, None, VLLM, breaker)


def configured(name: str, *, fallbacks: Sequence[str] = ()) -> Model:
    """A model entry of the configuration (its upstreams are the test's replicas)."""
    return Model.model_validate(
        {
            "name": name,
            "engine": "vllm",
            "fallbacks": list(fallbacks),
            "routing": HEAVIEST_FIRST,
            "upstreams": [{"name": "u", "url": "http://127.0.0.1:9"}],
        }
    )


class Route:
    """The route stage over ``replicas``, for ``models`` (each with its fallbacks), wired
    as the Gateway wires it: the models' routing strategies (the heaviest replica not
    tried yet first), the relay on the upstream pool, the settler counting in metrics."""

    def __init__(
        self, models: Sequence[Model], replicas: Sequence[Replica], *, retries: int = 2
    ) -> None:
        self.table = EndpointTable(models, {"vllm": VLLM})
        self.registry = ReplicaRegistry(
            replicas, strategies={m.name: strategy_for(m.routing) for m in models}
        )
        self.pool = UpstreamPool(connect_timeout=5)
        self.metrics = GatewayMetrics()
        self.forwarder = Forwarder(
            relay=Relay(DEADLINES, self.pool),
            registry=self.registry,
            settler=Settler(self.metrics),
            retries=retries,
        )

    def request(self, *, stream: bool = False, priority: int | None = None) -> Exchange:
        """A chat request for model m, as the read stage leaves it."""
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": 8,
            "stream": stream,
        }
        ex = Exchange("req-1", "POST", CHAT, time.monotonic(), endpoint=CHAT, stream=stream)
        ex.body, ex.parsed = orjson.dumps(body), body
        ex.content_type = b"application/json"
        ex.priority = priority
        return ex

    def entry(self, ex: Exchange) -> ModelEntry:
        return self.table.model_for(ex)

    async def forward(self, ex: Exchange, ticket: Ticket | None = None) -> Client:
        client = Client()
        await self.forwarder.forward(ex, self.entry(ex), client.send, ticket or Ticket())
        return client

    def metric(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0


@pytest.fixture
async def routes() -> AsyncIterator[list[Route]]:
    """The routes a test built; their upstream pools are closed after it."""
    built: list[Route] = []
    yield built
    for route in built:
        await route.pool.close()


@pytest.fixture
def fallback_sim() -> Iterator[SimProcess]:
    """A simulated engine serving model ``f``, the fallback of m."""
    with SimProcess("--model", "f", "--speed", "0") as engine:
        yield engine


def route_of(routes: list[Route], models: Sequence[Model], replicas: Sequence[Replica]) -> Route:
    route = Route(models, replicas)
    routes.append(route)
    return route


async def chat_requests(engine: SimProcess) -> list[dict[str, Any]]:
    """The chat requests that reached ``engine``, oldest first."""
    return await asyncio.to_thread(engine.requests, CHAT)


async def test_a_replica_failing_before_any_byte_is_tried_again_on_another_and_its_breaker_told(
    sim: SimProcess, other_sim: SimProcess, routes: list[Route]
) -> None:
    r0, r1 = replica("r0", sim, weight=2), replica("r1", other_sim)
    route = route_of(routes, [configured("m")], [r0, r1])
    await asyncio.to_thread(sim.faults, fail_next=1, fail_status=503)  # r0 is tried first
    ex = route.request()
    client = await route.forward(ex)
    assert client.status == 200, client.body
    assert orjson.loads(client.body)["choices"][0]["message"]["content"]
    assert (ex.replica, ex.attempts, ex.outcome) == ("r1", 2, Outcome.OK)
    assert len(await chat_requests(sim)) == len(await chat_requests(other_sim)) == 1
    # r0's breaker counted the failure; r1's answer kept its own clean
    assert r0.breaker.consecutive_failures == 1
    assert r1.breaker.consecutive_failures == 0
    assert route.metric("fairgate_upstream_retries_total", model="m") == 1
    assert route.metric("fairgate_upstream_errors_total", replica="r0", reason="upstream_503") == 1


@pytest.mark.parametrize("status", [502, 503, 504])
async def test_a_retried_502_or_504_is_charged_its_reservation_and_a_503_nothing(
    status: int, sim: SimProcess, other_sim: SimProcess, routes: list[Route]
) -> None:
    # A 502 or 504 answered by a proxy in front of the engine (its connection to the
    # engine broke, its deadline ran out) may come after the engine generated for the
    # request; a 503 is a refusal before any work. Charged nothing, the first two let a
    # caller have tokens made for free, on every retry.
    r0, r1 = replica("r0", sim, weight=2), replica("r1", other_sim)
    route = route_of(routes, [configured("m")], [r0, r1])
    await asyncio.to_thread(sim.faults, fail_next=1, fail_status=status)  # r0 is tried first
    ex = route.request()
    ex.reservation = reservation = Reservation(10, 8)
    client = await route.forward(ex)
    assert client.status == 200, client.body
    served = charge(ex)
    assert served is not None and not served.estimated  # r1's own report
    if status == 503:
        assert (ex.unanswered, ex.usage) == ((), served)
    else:
        assert ex.unanswered == ("m",)
        assert ex.usage == served.plus(reservation.usage())


async def test_every_replica_answering_504_is_relayed_and_charged_a_reservation_each(
    sim: SimProcess, other_sim: SimProcess, routes: list[Route]
) -> None:
    route = route_of(routes, [configured("m")], [replica("r0", sim), replica("r1", other_sim)])
    for engine in (sim, other_sim):
        await asyncio.to_thread(engine.faults, fail_next=1, fail_status=504)
    ex = route.request()
    ex.reservation = reservation = Reservation(10, 8)
    client = await route.forward(ex)
    assert client.status == 504  # the last engine answer, relayed
    assert charge(ex) is None  # no attempt was answered
    assert ex.usage == reservation.usage(2)
    assert ex.usage is not None and ex.usage.estimated


async def test_an_answer_once_started_is_never_retried(
    sim: SimProcess, other_sim: SimProcess, routes: list[Route]
) -> None:
    r0, r1 = replica("r0", sim, weight=2), replica("r1", other_sim)
    route = route_of(routes, [configured("m")], [r0, r1])
    await asyncio.to_thread(sim.faults, close_mid_stream=2)  # r0 drops after two tokens
    ex = route.request(stream=True)
    client = await route.forward(ex)
    assert client.status == 200
    events = [e for e in client.body.split(b"\n\n") if e.startswith(b"data:")]
    assert len(events) >= 2 and b"error" in events[-1]  # the stream ends on an error event
    assert b"[DONE]" not in client.body
    assert [m["status"] for m in client.messages if m["type"] == "http.response.start"] == [200]
    assert (ex.replica, ex.attempts, ex.outcome) == ("r0", 1, Outcome.TRUNCATED)
    assert await chat_requests(other_sim) == []  # no other try
    assert route.metric("fairgate_upstream_retries_total", model="m") == 0


async def test_a_model_with_no_replica_left_falls_back_to_the_next_of_its_chain(
    sim: SimProcess, fallback_sim: SimProcess, routes: list[Route]
) -> None:
    r0, f0 = replica("r0", sim), replica("f0", fallback_sim, model="f")
    route = route_of(routes, [configured("m", fallbacks=["f"]), configured("f")], [r0, f0])
    await asyncio.to_thread(sim.faults, fail_next=1, fail_status=503)  # m's only replica
    ex = route.request()
    client = await route.forward(ex)
    assert client.status == 200, client.body
    assert orjson.loads(client.body)["model"] == "f"  # the fallback's engine answered
    assert (ex.requested_model, ex.model, ex.replica, ex.attempts) == ("m", "f", "f0", 2)
    [sent] = await chat_requests(fallback_sim)
    assert orjson.loads(sent["body"])["model"] == "f"  # its body names its own model
    assert route.metric("fairgate_fallbacks_total", model="m", fallback="f") == 1


async def test_the_answer_names_its_request_and_how_fair_share_admitted_it(
    sim: SimProcess, routes: list[Route]
) -> None:
    route = route_of(routes, [configured("m")], [replica("r0", sim)])
    within = await route.forward(route.request(priority=0), Ticket(pool="p", priority=0))
    assert within.status == 200, within.body
    assert within.headers[b"x-request-id"] == b"req-1"
    assert within.headers[b"x-fairgate-share"] == b"within; priority=0"
    borrower = Ticket(pool="p", borrowing=True, rank=2, priority=30)
    borrowed = await route.forward(route.request(stream=True, priority=30), borrower)
    assert borrowed.status == 200
    assert borrowed.headers[b"x-request-id"] == b"req-1"
    assert borrowed.headers[b"x-fairgate-share"] == b"borrowed; rank=2; priority=30"
    # the header's priority is the one the engine was sent
    assert [r["priority"] for r in await chat_requests(sim)] == [0, 30]
    outside = await route.forward(route.request())  # its model in no pool
    assert outside.headers[b"x-request-id"] == b"req-1"
    assert b"x-fairgate-share" not in outside.headers


async def test_when_every_try_failed_the_last_engines_own_answer_is_relayed(
    sim: SimProcess, other_sim: SimProcess, routes: list[Route]
) -> None:
    r0, r1 = replica("r0", sim, weight=2), replica("r1", other_sim)
    route = route_of(routes, [configured("m")], [r0, r1])
    await asyncio.to_thread(sim.faults, fail_next=1, fail_status=503)
    await asyncio.to_thread(other_sim.faults, fail_next=1, fail_status=502)  # tried last
    ex = route.request(priority=0)
    client = await route.forward(ex, Ticket(pool="p", priority=0))
    assert client.status == 502
    error = orjson.loads(client.body)["error"]
    assert error["message"] == "injected fault: this request fails with status 502"
    assert client.headers[b"content-type"] == b"application/json"
    assert client.headers[b"x-request-id"] == b"req-1"
    assert client.headers[b"x-fairgate-share"] == b"within; priority=0"
    assert (ex.attempts, ex.outcome, ex.status) == (2, Outcome.UPSTREAM_ERROR, 502)
    assert r0.breaker.consecutive_failures == r1.breaker.consecutive_failures == 1


async def test_no_replica_to_try_is_the_gateways_503_no_replica(
    sim: SimProcess, routes: list[Route]
) -> None:
    r0 = replica("r0", sim)
    route = route_of(routes, [configured("m")], [r0])
    for _ in range(3):  # r0's breaker opens: it is not tried for an hour
        r0.breaker.failure()
    ex = route.request()
    client = Client()
    with pytest.raises(ServiceUnavailable) as refused:
        await route.forwarder.forward(ex, route.entry(ex), client.send, Ticket())
    assert (refused.value.status, refused.value.code) == (503, "no_replica")
    assert "model 'm'" in refused.value.message
    assert client.messages == []  # the pipeline answers with the error
    assert ex.attempts == 0
    assert await chat_requests(sim) == []
