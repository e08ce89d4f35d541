"""A hostile tenant against a gateway with budgets and limits set, through real processes.

One vLLM simulator, one llama-server simulator, one gateway with its store
(SQLite, then PostgreSQL); budgets on an organisation, a team, a key, a team's use
of one model (set on its alias) and another organisation's tag; key and team
limits; a per-network connection cap. The hostile organisation (``test-org``:
teams ``t``, ``t2``, ``t3``) attacks with several keys and a member's admin token,
each attack a named phase after the item of issue #17 it tries:

- phase 1: llama-server's native routes, plain and streamed (charged zero output once);
- phase 2: the output bound — no ``max_tokens``, ``ignore_eos``/``min_tokens``,
  ``n_predict``, batch prompt lists with ``n``/``best_of``, streams abandoned mid-way;
- phase 3: a per-model budget set on an alias, spent through the alias and through a
  fallback;
- phase 4: another organisation's tag (the same word, the owned scope spelled out, a
  tag only it may send), and a member setting or dropping its key's tags;
- phase 5: a member raising its keys' limits or its team's, opening more keys than it
  may, and sending from all of them at once past the team's total;
- phase 6: model listings, ``GET /me`` and refused bodies in a loop, to crowd out
  another tenant's usage records;
- phase 7: a key at its in-flight limit sends a head announcing 32 MiB and no body,
  then a whole 32 MiB body (refused from the head, the body never read); the tenant
  opens more connections than its network may hold (the victim, from another
  address, is served meanwhile).

Meanwhile a victim organisation sends ordinary requests. Afterwards the test
reads the usage records (the store's tables), the budget counters (``GET /me``)
and the simulators' own counters (``/sim/stats``), and asserts:

- no budget ended above its cap by more than the largest reservation sent, and
  each budget's counter is exactly what its records were charged;
- every token the engines generated was charged (records ≥ ``generation_tokens_total``),
  and no answered request was charged more than its reservation;
- every record whose usage the engine never reported is flagged estimated and
  charged its whole reservation;
- every victim request, and every hostile request that reached an engine, has its record.

Prices are one micro GPU-hour per completion token and nothing for the prompt, so a
request's cost is its completion tokens and a reservation's cost its completion part.
(The prompt's reservation is an estimate, body bytes / 4: priced, a prompt longer in
tokens than that would add its excess to the bound, as docs/limits.md says.)
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import sqlalchemy as sa
from tests.e2e.conftest import StartSim, model, write_config
from tests.e2e.robust_wire import connect, read_to_end, until
from tests.e2e.test_head_limits import big_body, head_only

from fairgate.config import load_config
from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess
from fairgate.store import tables
from fairgate.tenancy import open_tenancy

pytestmark = pytest.mark.slow

MASTER = "a-master-key-for-the-hostile-tenant"
PRICES = {"input_per_mtok": 0.0, "output_per_mtok": 1.0}

CEILING = 100  # models[].max_tokens: the largest cap a request may ask for
DEFAULT_CAP = 60  # limits.default_max_tokens: what a vLLM request without a cap gets
MAX_PROMPTS = 4
MAX_N = 2
EOS_AFTER = 5  # the simulated models end their answers early unless told to ignore it

# Both organisations may send the tag "grant" in the header; only the victim "v-lab".
ORGS = [
    {"name": "test-org", "share": 0.5, "teams": ["t", "t2", "t3"], "tags": ["grant"]},
    {"name": "victim-org", "share": 0.5, "teams": ["v"], "tags": ["grant", "v-lab"]},
]
VICTIM_TAG = "tag:org:victim-org/grant"
# (scope, model, cap in micro GPU-hours = completion tokens); each binds during the attack
BUDGETS: list[tuple[str, str | None, int]] = [
    ("org:test-org", None, 2500),
    ("team:t", None, 1000),
    ("key:{a}", None, 300),
    ("team:t2", "m-alias", 300),  # phase 3: set on an alias
    (VICTIM_TAG, None, 1000),  # phase 4: another organisation's tag budget
]
TAGS = "x-fairgate-tags"

JSON = {"content-type": "application/json"}
PHASE_SECONDS = 25  # a phase that has not hit its budget by then stops anyway


@dataclass
class Sent:
    """One request the attack sent and what it may be charged."""

    phase: str
    status: int
    prompt: int  # reserved prompt tokens: ceil(body bytes / 4)
    completion: int  # reserved completion tokens (0: refused before the limits, none)
    code: str = ""  # the error code of a refusal ("400": the engine's own)
    reported: int | None = None  # completion tokens the answer itself reported


@dataclass
class Ledger:
    """Everything the attack and the victim sent, by request id."""

    sent: dict[str, Sent] = field(default_factory=dict)
    abandoned: list[str] = field(default_factory=list)
    victim: list[str] = field(default_factory=list)
    # (phase, path, status, error code, message) of every error answer
    refusals: list[tuple[str, str, int, str, str]] = field(default_factory=list)

    def largest_reservation(self) -> int:
        return max(s.completion for s in self.sent.values())


def error(answer: httpx.Response) -> tuple[str, str]:
    """(code, message) of an error envelope."""
    try:
        found = answer.json().get("error", {})
    except ValueError:
        return "", ""
    if not isinstance(found, dict):
        return "", str(found)
    return str(found.get("code", "")), str(found.get("message", ""))


def refused(ledger: Ledger, phase: str, path: str, answer: httpx.Response) -> str:
    """Note an error answer in the ledger; its code ("" for a success)."""
    if answer.status_code < 400:
        return ""
    code, message = error(answer)
    ledger.refusals.append((phase, path, answer.status_code, code, message))
    return code


class Tenant:
    """One key's client, recording every answer in the ledger."""

    def __init__(self, gateway: GatewayProcess, key: str, ledger: Ledger, phase: str) -> None:
        self.client = httpx.AsyncClient(
            base_url=gateway.url, headers={"authorization": f"Bearer {key}"}, timeout=60
        )
        self.ledger = ledger
        self.phase = phase

    async def __aenter__(self) -> Tenant:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.aclose()

    async def post(
        self, path: str, body: dict[str, Any], completion: int, tags: str | None = None
    ) -> httpx.Response:
        """POST ``body``; ``completion`` is the output the gateway must reserve for it;
        ``tags`` go in the tag header."""
        raw = orjson.dumps(body)
        headers = JSON if tags is None else {**JSON, TAGS: tags}
        answer = await self.client.post(path, content=raw, headers=headers)
        self.note(path, answer, raw, completion)
        return answer

    def note(self, path: str, answer: httpx.Response, raw: bytes, completion: int) -> None:
        request_id = answer.headers.get("x-request-id")
        assert request_id, f"{path} answered without a request id: {answer.status_code}"
        reported = None
        if answer.status_code == 200 and not answer.headers.get("content-type", "").startswith(
            "text/event-stream"
        ):
            document = answer.json()
            usage = document.get("usage") or {}
            reported = usage.get("completion_tokens", document.get("tokens_predicted"))
        code = refused(self.ledger, self.phase, path, answer)
        self.ledger.sent[request_id] = Sent(
            self.phase, answer.status_code, -(-len(raw) // 4), completion, code, reported
        )

    async def abandon(self, path: str, body: dict[str, Any], completion: int) -> None:
        """Start a stream, read a few events, and go away."""
        raw = orjson.dumps(body)
        async with self.client.stream("POST", path, content=raw, headers=JSON) as answer:
            if answer.status_code == 200:
                seen = 0
                async for line in answer.aiter_lines():
                    seen += line.startswith("data:")
                    if seen >= 3:
                        break
            else:
                await answer.aread()
            self.note(path, answer, raw, completion)
            if answer.status_code == 200:
                self.ledger.abandoned.append(answer.headers["x-request-id"])


def spent_out(ledger: Ledger, phase: str) -> bool:
    return any(p == phase and code == "budget_exceeded" for p, _, _, code, _ in ledger.refusals)


async def repeat(phase: str, ledger: Ledger, round_: Callable[[], Awaitable[None]]) -> None:
    """Run ``round_`` until the phase's budget refuses it (then once more), or time is up."""
    deadline = time.monotonic() + PHASE_SECONDS
    while time.monotonic() < deadline:
        await round_()
        if spent_out(ledger, phase):
            await round_()  # spent is spent: the next round is refused too
            return


# ---- phase 1: llama-server's native routes are charged what the engine reports


async def phase_1_llama_native_usage(tenant: Tenant, ledger: Ledger) -> None:
    async def round_() -> None:
        await tenant.post(
            "/completion",
            {"model": "l", "prompt": "go on", "n_predict": 40, "ignore_eos": True},
            40,
        )
        await tenant.post(
            "/infill",
            {
                "model": "l",
                "input_prefix": "def f(",
                "input_suffix": "):",
                "n_predict": 30,
                "ignore_eos": True,
            },
            30,
        )
        body = {
            "model": "l",
            "prompt": "stream",
            "n_predict": 25,
            "ignore_eos": True,
            "stream": True,
        }
        await tenant.post("/completion", body, 25)

    await repeat(tenant.phase, ledger, round_)


# ---- phase 2: every request has an output bound, and it is reserved whole


async def phase_2_output_bound(tenant: Tenant, ledger: Ledger) -> None:
    chat = "/v1/chat/completions"
    hi = [{"role": "user", "content": "hi"}]
    # refused before anything is charged: over the ceiling, min_tokens above the cap,
    # too many prompts, n_predict's "no limit", a byte-exact engine without a cap
    for path, body in (
        (chat, {"model": "m", "messages": hi, "max_tokens": CEILING + 1}),
        (chat, {"model": "m", "messages": hi, "min_tokens": DEFAULT_CAP + 1, "ignore_eos": True}),
        ("/v1/completions", {"model": "m", "prompt": ["p"] * (MAX_PROMPTS + 1), "max_tokens": 1}),
        ("/completion", {"model": "l", "prompt": "x", "n_predict": -1, "max_tokens": 5}),
        ("/completion", {"model": "l", "prompt": "x", "n_predict": CEILING * 10}),
        (chat, {"model": "l", "messages": hi}),
    ):
        answer = await tenant.post(path, body, 0)
        assert answer.status_code == 400, (path, body, answer.text)

    async def round_() -> None:
        # no cap at all, told to ignore its end token: runs to the gateway's default
        await tenant.post(chat, {"model": "m", "messages": hi, "ignore_eos": True}, DEFAULT_CAP)
        body = {"model": "m", "messages": hi, "min_tokens": 50, "ignore_eos": True}
        await tenant.post(chat, body, DEFAULT_CAP)
        # a batch of prompts with n and best_of: every sequence reserved
        batch = {"model": "m", "prompt": ["a", "b", "c", "d"], "n": MAX_N, "max_tokens": 20}
        await tenant.post("/v1/completions", batch, MAX_PROMPTS * MAX_N * 20)
        best = {"model": "m", "prompt": "x", "best_of": MAX_N, "max_tokens": 30, "ignore_eos": True}
        await tenant.post("/v1/completions", best, MAX_N * 30)
        # llama-server reads n_predict before max_tokens: the larger one is reserved
        both = {"model": "l", "prompt": "y", "n_predict": 50, "max_tokens": 5, "ignore_eos": True}
        await tenant.post("/completion", both, 50)
        # a stream abandoned before its usage report: charged its reservation
        stream = {
            "model": "m",
            "messages": hi,
            "max_tokens": CEILING,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        await tenant.abandon(chat, stream, CEILING)

    await repeat(tenant.phase, ledger, round_)


# ---- phase 3: a per-model budget binds, set on an alias, and fallbacks are charged to it


async def phase_3_model_budget_on_an_alias(tenant: Tenant, ledger: Ledger) -> None:
    hi = [{"role": "user", "content": "hi"}]

    async def round_() -> None:
        # the alias of the model the budget was set on
        body = {"model": "m-alias", "messages": hi, "ignore_eos": True}
        await tenant.post("/v1/chat/completions", body, DEFAULT_CAP)
        # a model whose only engine is down: served by its fallback, the budget's model
        body = {"model": "m-broken", "prompt": "x", "max_tokens": 30, "ignore_eos": True}
        await tenant.post("/v1/completions", body, 30)

    await repeat(tenant.phase, ledger, round_)


# ---- phase 4: tag budgets belong to their tenant; tags are not the members' to set

PHASE_4_ROUNDS = 4


async def phase_4_tags(tenant: Tenant, ledger: Ledger, admin_url: str, member: str) -> None:
    """Header tags: the victim's tag word (allowed here too, it charges this
    organisation's budget, never the victim's), the victim's owned scope spelled out,
    a tag only the victim may send. Then the member tries to set its key's tags."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10}
    for _ in range(PHASE_4_ROUNDS):
        answer = await tenant.post("/v1/chat/completions", body, 10, tags="grant")
        assert answer.status_code in (200, 429), answer.text
        for tag in ("org:victim-org/grant", "team:v/grant", "v-lab"):
            answer = await tenant.post("/v1/chat/completions", body, 0, tags=tag)
            assert (answer.status_code, error(answer)[0]) == (400, "tag_not_allowed"), tag
    async with httpx.AsyncClient(
        base_url=admin_url, headers={"authorization": f"Bearer {member}"}, timeout=30
    ) as client:
        tagged = await client.post(
            "/admin/keys", json={"team": "t2", "name": "tagged", "tags": ["grant"]}
        )
        assert tagged.status_code == 403, tagged.text
        own = await client.post("/admin/keys", json={"team": "t2", "name": "own"})
        assert own.status_code == 201, own.text
        for tags in (["grant"], []):
            changed = await client.patch(f"/admin/keys/{own.json()['id']}", json={"tags": tags})
            assert changed.status_code == 403, changed.text


# ---- phase 5: a member can neither raise its keys' limits nor multiply them with keys

TEAM_LIMITS = {"rpm": 10, "total_rpm": 12, "total_max_in_flight": 2, "max_keys_per_member": 3}
PHASE_5_ATTEMPTS = 40  # per key at most: the team's rate is reached well within a minute


async def phase_5_team_limits(
    gateway: GatewayProcess, ledger: Ledger, member: str, stack: AsyncExitStack
) -> None:
    """As a member of team ``t3``: a key with limits above the team's, its own key's
    limits raised, the team's limits raised, more keys than a member may hold. Then every
    key it got sends at once, more than the team's total allows."""
    admin_client = await stack.enter_async_context(
        httpx.AsyncClient(
            base_url=gateway.admin_url, headers={"authorization": f"Bearer {member}"}, timeout=30
        )
    )
    raised = await admin_client.post(
        "/admin/keys", json={"team": "t3", "name": "wide", "rpm": 1_000_000}
    )
    assert raised.status_code in (400, 403), raised.text
    made = []
    for number in range(TEAM_LIMITS["max_keys_per_member"] + 1):
        answer = await admin_client.post("/admin/keys", json={"team": "t3", "name": f"k{number}"})
        made.append(answer)
    assert [a.status_code for a in made] == [201, 201, 201, 409], [a.text for a in made]
    assert error(made[-1])[0] == "too_many_keys"
    keys = [a.json() for a in made[:-1]]
    change = await admin_client.patch(f"/admin/keys/{keys[0]['id']}", json={"rpm": 1000})
    assert change.status_code == 403, change.text
    team = await admin_client.patch("/admin/teams/t3", json={"total_rpm": 1000})
    assert team.status_code in (403, 404), team.text

    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}

    reached = asyncio.Event()

    async def send(tenant: Tenant) -> None:
        # a refusal for the team's concurrency does not count against its rate, so every key
        # goes on until the team's rate refuses one (bounded: a key's own rate ends it too)
        for _ in range(PHASE_5_ATTEMPTS):
            answer = await tenant.post("/v1/chat/completions", body, 2)
            if error(answer)[0] == "team_rpm_limit_exceeded":
                reached.set()
            if reached.is_set():
                return

    tenants = [
        await stack.enter_async_context(Tenant(gateway, key["secret"], ledger, "5")) for key in keys
    ]
    await asyncio.gather(*(send(t) for t in tenants))
    served = [s for s in ledger.sent.values() if s.phase == "5" and s.status == 200]
    # three keys with 10 a minute each are still 12 a minute for the team, 2 at a time
    assert 0 < len(served) <= TEAM_LIMITS["total_rpm"], len(served)
    codes = {code for phase, _, _, code, _ in ledger.refusals if phase == "5"}
    assert "team_rpm_limit_exceeded" in codes, codes


# ---- phase 6: requests the gateway answers itself are metered and crowd nobody out

FLOOD_ROUNDS = 30  # at least, and on until the other phases are over


async def phase_6_unmetered_flood(tenant: Tenant, ledger: Ledger, done: asyncio.Event) -> None:
    rounds = 0
    while rounds < FLOOD_ROUNDS or not done.is_set():
        for answer in (
            await tenant.client.get("/v1/models"),
            await tenant.client.get("/me"),
            await tenant.client.post("/v1/chat/completions", content=b"{not json"),
        ):
            refused(ledger, tenant.phase, answer.request.url.path, answer)
        rounds += 1


# ---- phase 7: a key at its limit costs the gateway no body

IN_FLIGHT = 2  # hostile-d's max_in_flight
STALL = 15.0  # seconds the held requests wait for their first token (cancelled long before)


def whole_body(gateway: GatewayProcess, key: str) -> bytes:
    """A chat request of almost 32 MiB, sent whole (as far as the gateway lets it): the
    answer."""
    body = big_body()
    sock = connect(gateway.host, gateway.port)
    try:
        with contextlib.suppress(OSError):  # closed while the body is on its way: expected
            sock.sendall(
                (
                    f"POST /v1/chat/completions HTTP/1.1\r\nhost: gateway\r\n"
                    f"content-type: application/json\r\nauthorization: Bearer {key}\r\n"
                    f"content-length: {len(body)}\r\n\r\n"
                ).encode()
                + body
            )
        try:
            return read_to_end(sock, timeout=30)[0]
        except OSError:
            return b""
    finally:
        sock.close()


def status_and_code(answer: bytes) -> tuple[int, str]:
    assert answer, "no answer: the gateway waited for the body"
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), orjson.loads(body)["error"]["code"]


async def phase_7_head_before_body(
    tenant: Tenant, key: str, gateway: GatewayProcess, sim_l: SimProcess
) -> None:
    """The key fills its in-flight slots with requests the engine holds, then sends a head
    announcing 32 MiB without the body, and a whole 32 MiB body: both are refused from
    the head (429, connection closed), never waiting for or reading the body."""
    before = len(sim_l.requests(path="/completion"))
    sim_l.faults(stall_before_first_token=STALL, times=IN_FLIGHT)
    raw = orjson.dumps({"model": "l", "prompt": "hold", "n_predict": 10, "stream": True})

    async def hold() -> None:
        async with tenant.client.stream("POST", "/completion", content=raw, headers=JSON) as answer:
            async for _ in answer.aiter_raw():
                pass

    held = [asyncio.create_task(hold()) for _ in range(IN_FLIGHT)]
    try:
        arrived = await asyncio.to_thread(
            until,
            lambda: (
                (got := sim_l.requests(path="/completion")[before:])
                and len(got) == IN_FLIGHT
                and got
            ),
            20,
            "the held requests at the engine",
        )
        answer, end = await asyncio.to_thread(head_only, gateway, key=key)
        assert status_and_code(answer) == (429, "in_flight_limit_exceeded"), answer[:300]
        assert b"connection: close" in answer.lower() and end in ("eof", "reset")
        answer = await asyncio.to_thread(whole_body, gateway, key)
        assert status_and_code(answer) == (429, "in_flight_limit_exceeded"), answer[:300]
    finally:
        for task in held:
            task.cancel()  # the client goes away before the first token
        await asyncio.gather(*held, return_exceptions=True)
    # The held requests were abandoned before any answer: charged their reservation.
    for entry in arrived:
        request_id = {name.lower(): value for name, value in entry["headers"]}["x-request-id"]
        tenant.ledger.sent[request_id] = Sent(tenant.phase, 499, -(-len(raw) // 4), 10)
        tenant.ledger.abandoned.append(request_id)


PER_NETWORK = 24  # limits.max_connections_per_network
VICTIM_ADDRESS = "127.0.0.2"  # the victim's own network (the attack comes from 127.0.0.1)


async def phase_7_connections_per_network(gateway: GatewayProcess, victim_key: str) -> None:
    """The tenant opens more idle connections than its network may hold: those over the
    cap are answered 503 at once, while the victim's network is still served."""
    opened = [
        socket.create_connection(
            (gateway.host, gateway.port), timeout=20, source_address=("127.0.0.1", 0)
        )
        for _ in range(PER_NETWORK + 8)
    ]
    try:
        await asyncio.sleep(1.0)  # a connection over the cap is answered before any request
        answered, _, _ = select.select(opened, [], [], 0)
        refusals = [status_and_code(read_to_end(sock, timeout=5)[0]) for sock in answered]
        assert refusals and set(refusals) == {(503, "too_many_connections_from_network")}
        assert len(opened) - len(answered) <= PER_NETWORK  # the others are held, idle
        transport = httpx.AsyncHTTPTransport(local_address=VICTIM_ADDRESS)
        async with httpx.AsyncClient(transport=transport, timeout=20) as other:
            answer = await other.get(
                gateway.url + "/v1/models", headers={"authorization": f"Bearer {victim_key}"}
            )
        assert answer.status_code == 200, answer.text
    finally:
        for sock in opened:
            sock.close()


# ---- the victim: another organisation's ordinary traffic meanwhile


async def victim(gateway: GatewayProcess, key: str, ledger: Ledger, done: asyncio.Event) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    async with httpx.AsyncClient(
        base_url=gateway.url,
        headers={"authorization": f"Bearer {key}"},
        timeout=60,
        transport=httpx.AsyncHTTPTransport(local_address=VICTIM_ADDRESS),
    ) as client:
        while not done.is_set():
            answer = await client.post("/v1/chat/completions", json=body)
            assert answer.status_code == 200, answer.text
            ledger.victim.append(answer.headers["x-request-id"])


# ---- setting the gateway up through the admin API


def admin(gateway: GatewayProcess, method: str, path: str, **kw: Any) -> Any:
    answer = httpx.request(
        method,
        gateway.admin_url + path,
        headers={"authorization": f"Bearer {MASTER}"},
        timeout=30,
        **kw,
    )
    assert answer.status_code in (200, 201), answer.text
    return answer.json()


def new_key(gateway: GatewayProcess, team: str, name: str, **limits: int) -> tuple[str, str]:
    """(id, secret) of a key made by the operator."""
    made = admin(gateway, "POST", "/admin/keys", json={"team": team, "name": name, **limits})
    return made["id"], made["secret"]


def me(gateway: GatewayProcess, key: str) -> dict[str, Any]:
    answer = httpx.get(gateway.url + "/me", headers={"authorization": f"Bearer {key}"}, timeout=30)
    assert answer.status_code == 200, answer.text
    document: dict[str, Any] = answer.json()
    return document


def records(config: Path) -> dict[str, dict[str, Any]]:
    """Every usage record in the store, by request id, with its set of tags."""

    async def read() -> dict[str, dict[str, Any]]:
        async with open_tenancy(load_config(config)) as tenancy, tenancy.store.read() as conn:
            rows = (await conn.execute(sa.select(tables.usage_records))).mappings().all()
            tags = (await conn.execute(sa.select(tables.usage_record_tags))).all()
        found = {row["request_id"]: dict(row) | {"tags": set()} for row in rows}
        for request_id, tag in tags:
            found[request_id]["tags"].add(tag)
        return found

    return asyncio.run(read())


def generated(sim: SimProcess) -> int:
    total: int = sim.stats()["generation_tokens_total"]
    return total


def start_gateway(
    tmp_path: Path, store: dict[str, str], sim_v: SimProcess, sim_l: SimProcess
) -> GatewayProcess:
    (tmp_path / "master.key").write_text(MASTER + "\n")
    with socket.socket() as unused:  # a port nothing listens on
        unused.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{unused.getsockname()[1]}"
    models = [
        model("m", sim_v, aliases=["m-alias"], cost=PRICES, max_tokens=CEILING),
        model("l", sim_l, engine="llama-server", cost=PRICES, max_tokens=CEILING),
        model(
            "m-broken",
            upstreams=[{"name": "r0", "url": dead}],
            fallbacks=["m-alias"],
            cost=PRICES,
            max_tokens=CEILING,
        ),
    ]
    config = write_config(
        tmp_path,
        models,
        orgs=ORGS,
        store=store,
        master_key_file="master.key",
        limits={
            "default_max_tokens": DEFAULT_CAP,
            "max_prompts": MAX_PROMPTS,
            "max_n": MAX_N,
            "max_connections_per_network": PER_NETWORK,
        },
        state={"backend": "memory", "budget_refresh": "1s"},
        accounting={"queue_capacity": 100},
    )
    return GatewayProcess(config).start()


@dataclass
class Keys:
    a: str
    a_id: str
    b: str
    c: str
    d: str
    e: str
    f: str
    flood: str
    victim: str
    witness: str  # a victim key carrying the victim's tag, whose GET /me shows its budget
    member: str  # the admin token of a member of teams t2 and t3

    def readers(self) -> tuple[str, ...]:
        """Keys whose ``GET /me`` together show every budget."""
        return self.a, self.e, self.witness


def provision(gateway: GatewayProcess) -> Keys:
    """The keys, a member and the budgets, made by the operator through the admin API."""
    a_id, a = new_key(gateway, "t", "hostile-a")
    _, b = new_key(gateway, "t", "hostile-b")
    _, c = new_key(gateway, "t2", "hostile-c")
    _, d = new_key(gateway, "t", "hostile-d", max_in_flight=IN_FLIGHT)
    _, e = new_key(gateway, "t2", "hostile-e")
    _, f = new_key(gateway, "t2", "hostile-f")
    _, flood = new_key(gateway, "t", "hostile-flood", rpm=100)
    _, victim_key = new_key(gateway, "v", "victim")
    made = admin(gateway, "POST", "/admin/keys", json={"team": "v", "tags": ["grant"]})
    admin(gateway, "POST", "/admin/users", json={"name": "mallory", "org": "test-org"})
    admin(gateway, "POST", "/admin/users/mallory/roles", json={"role": "member", "team": "t2"})
    admin(gateway, "POST", "/admin/users/mallory/roles", json={"role": "member", "team": "t3"})
    admin(gateway, "PATCH", "/admin/teams/t3", json=TEAM_LIMITS)
    member = admin(gateway, "POST", "/admin/admin-tokens", json={"user": "mallory"})["secret"]
    keys = Keys(a, a_id, b, c, d, e, f, flood, victim_key, made["secret"], member)
    for scope, name, micro in BUDGETS:
        budget = {"scope": scope.format(a=a_id), "period": "month", "max": f"0.{micro:06d}"}
        answer = admin(gateway, "PUT", "/admin/budgets", json=budget | {"model": name})
        if name == "m-alias":  # phase 3: stored under the canonical name
            assert answer["model"] == "m", answer
    until(lambda: len(counters(gateway, keys)) == len(BUDGETS), 20, "the budgets in force")
    return keys


async def attack(gateway: GatewayProcess, keys: Keys, ledger: Ledger, sim_l: SimProcess) -> None:
    """The phases, with the flood and the victim's traffic all the while.

    Phase 7 goes first, alone on the llama-server engine (its held requests take the
    engine's stall faults, which go to whichever requests arrive next). Then team
    ``t`` spends its key and team budgets (phases 1 and 2) while team ``t2`` spends its
    budget for ``m`` and tries the tags (phases 3 and 4) and team ``t3`` its limits
    (phase 5); then ``t2`` drains what is
    left of the organisation's, three requests at a time (in this order every budget is
    the one that refuses some request)."""
    done = asyncio.Event()
    async with AsyncExitStack() as stack:

        def tenant(key: str, phase: str) -> Awaitable[Tenant]:
            return stack.enter_async_context(Tenant(gateway, key, ledger, phase))

        t6 = await tenant(keys.flood, "6")
        background = [
            asyncio.create_task(victim(gateway, keys.victim, ledger, done)),
            *(asyncio.create_task(phase_6_unmetered_flood(t6, ledger, done)) for _ in range(3)),
        ]
        try:
            await phase_7_head_before_body(await tenant(keys.d, "7"), keys.d, gateway, sim_l)
            await phase_7_connections_per_network(gateway, keys.victim)
            await asyncio.gather(
                phase_1_llama_native_usage(await tenant(keys.b, "1"), ledger),
                phase_2_output_bound(await tenant(keys.a, "2"), ledger),
                phase_3_model_budget_on_an_alias(await tenant(keys.e, "3"), ledger),
                phase_4_tags(await tenant(keys.f, "4"), ledger, gateway.admin_url, keys.member),
                phase_5_team_limits(gateway, ledger, keys.member, stack),
            )
            sister = [await tenant(keys.c, "1/t2") for _ in range(3)]
            await asyncio.gather(*(phase_1_llama_native_usage(t, ledger) for t in sister))
        finally:
            done.set()
            await asyncio.gather(*background)


Counters = dict[tuple[str, str, str | None], dict[str, Any]]


def counters(gateway: GatewayProcess, keys: Keys) -> Counters:
    """Every budget's counter, by (scope kind, scope, model), from the keys' ``GET /me``."""
    found: Counters = {}
    for key in keys.readers():
        for budget in me(gateway, key)["budgets"]:
            found[budget["scope_kind"], budget["scope"], budget["model"]] = budget
    return found


def settled(gateway: GatewayProcess, keys: Keys) -> Counters:
    """The budget counters once nothing is reserved any more (two reads agree after a
    pause: abandoned streams settle when the gateway notices the client left)."""

    def steady() -> Counters | None:
        first = counters(gateway, keys)
        time.sleep(1.0)
        return first if counters(gateway, keys) == first else None

    found: Counters = until(steady, 20, "budgets settled")
    return found


def test_a_hostile_tenant_exceeds_no_budget_and_leaves_no_token_uncharged(
    tmp_path: Path, start_sim: StartSim, store: dict[str, str]
) -> None:
    common = ("--speed", "200", "--ttft", "0", "--eos-after", str(EOS_AFTER))
    common += ("--max-tokens-default", "2000")  # what an uncapped request would run to
    sim_v = start_sim("--model", "m", *common)
    sim_l = start_sim("--model", "l", "--personality", "llama-server", *common)
    gateway = start_gateway(tmp_path, store, sim_v, sim_l)
    ledger = Ledger()
    try:
        keys = provision(gateway)
        asyncio.run(attack(gateway, keys, ledger, sim_l))
        spent = settled(gateway, keys)
    finally:
        gateway.stop()  # a clean stop drains the recorder into the store
    stored = records(gateway.config)
    engines_generated = generated(sim_v) + generated(sim_l)

    check_records(ledger, stored)
    # no token went uncharged: the records hold at least what the engines generated
    charged = sum(r["completion_tokens"] for r in stored.values())
    assert charged >= engines_generated > 0, (charged, engines_generated)
    check_budgets(ledger, stored, spent, keys)
    check_phases(ledger)  # last: the attacks did press every budget


def check_phases(ledger: Ledger) -> None:
    """Each phase pressed its budget, and the refusals were the right ones."""
    codes = {(phase, code) for phase, _, _, code, _ in ledger.refusals}
    for phase in ("1", "1/t2", "2", "3"):
        assert (phase, "budget_exceeded") in codes, f"phase {phase} never reached its budget"
    for code in (
        "max_tokens_too_large",
        "invalid_value",
        "too_many_prompts",
        "max_tokens_required",
    ):
        assert ("2", code) in codes
    flood = {(path, code) for phase, path, _, code, _ in ledger.refusals if phase == "6"}
    assert ("/v1/models", "rpm_limit_exceeded") in flood
    assert ("/me", "rpm_limit_exceeded") in flood
    reached = {message for *_, message in ledger.refusals if "Budget spent" in message}
    for scope in ("org 'test-org'", "team 't'", "key '", "team 't2' for model 'm'"):
        assert any(f"budget of {scope}" in message for message in reached), scope


def reached_engine(sent: Sent) -> bool:
    """The request was admitted and reached an engine (200, the engine's own 4xx, or 499:
    the client left first)."""
    return sent.completion > 0 and (sent.status in (200, 499) or sent.code.isdigit())


def check_records(ledger: Ledger, stored: dict[str, dict[str, Any]]) -> None:
    # nothing dropped: every victim request and every request that reached an engine
    lost = [rid for rid in ledger.victim if rid not in stored]
    assert not lost, f"{len(lost)} of {len(ledger.victim)} victim records lost"
    served = {rid: s for rid, s in ledger.sent.items() if reached_engine(s)}
    lost = [rid for rid in served if rid not in stored]
    assert not lost, f"{len(lost)} of {len(served)} served hostile records lost"
    for rid, sent in served.items():
        record = stored[rid]
        reservation = (sent.prompt, sent.completion)
        if record["estimated"]:
            # usage unknown: charged the whole reservation, never a lower guess
            assert (record["prompt_tokens"], record["completion_tokens"]) == reservation, (
                sent,
                record,
            )
        else:
            # usage known: what the engine reported, and within the reservation
            assert record["completion_tokens"] <= sent.completion, (sent, record)
            if sent.reported is not None:
                assert record["completion_tokens"] == sent.reported, (sent, record)
    for rid in ledger.abandoned:
        record = stored[rid]
        assert record["estimated"] and record["outcome"] == "client_abort", str(
            sorted(record.items())
        )
    # every estimated record is one of the attack's, checked above
    estimated = {rid for rid, r in stored.items() if r["estimated"] and r["completion_tokens"]}
    assert estimated <= set(served), estimated - set(served)
    assert set(ledger.abandoned) <= estimated


def in_scope(record: dict[str, Any], kind: str, scope: str, model: str | None) -> bool:
    """Whether the budget (kind, scope, model) binds the request ``record`` is of."""
    if model is not None and record["model"] != model:
        return False  # charged to the model that served
    if kind == "tag":  # an owned tag: org:ORG/TAG or team:TEAM/TAG
        owner, _, tag = scope.partition("/")
        owner_kind, _, name = owner.partition(":")
        return tag in record["tags"] and record[owner_kind] == name
    return bool(record[{"org": "org", "team": "team", "key": "key_id"}[kind]] == scope)


def check_budgets(
    ledger: Ledger, stored: dict[str, dict[str, Any]], spent: Counters, keys: Keys
) -> None:
    """No budget above its cap by more than one reservation; each counter is its records;
    the other organisation's tag budget untouched."""
    largest = ledger.largest_reservation()
    expected: dict[tuple[str, str, str | None], int] = {}
    for scope, alias, cap in BUDGETS:
        kind, _, name = scope.format(a=keys.a_id).partition(":")
        expected[kind, name, None if alias is None else "m"] = cap
    assert {k: b["max_micro"] for k, b in spent.items()} == expected
    for (kind, scope, served_by), budget in spent.items():
        used, cap = budget["spent_micro"], budget["max_micro"]
        assert used <= cap + largest, (kind, scope, served_by, used, cap, largest)
        charged = sum(
            r["cost_micro"] for r in stored.values() if in_scope(r, kind, scope, served_by)
        )
        assert used == charged, (kind, scope, served_by, used, charged)
    # The victim's tag budget was never charged, though the attack's "grant" was.
    assert spent["tag", VICTIM_TAG.split(":", 1)[1], None]["spent_micro"] == 0
    tagged = [r for r in stored.values() if "grant" in r["tags"] and r["cost_micro"]]
    assert tagged and {r["org"] for r in tagged} == {"test-org"}
