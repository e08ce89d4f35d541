"""Every key limit through a real gateway and simulated engine, on both state back ends.

The per-key limits (RPM, RPD, in flight, TPM, ``GET /me``) run against one gateway
per state back end (``shared``: once with the memory back end, once on the test Redis
under a prefix of its own); each test makes a key of its own with its limits and talks
HTTP to the gateway process, the simulators reset before it. The others give TEST_KEY
its limits in the store before a gateway of their own starts (``configure``). Also
here: the limit service down (fail closed or open, readiness unaffected) and request
tags.

``configure``, ``chat``, ``refusal`` and ``PRICES`` are shared with test_budgets.py and
test_limits_shared.py.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from tests.e2e.conftest import TEST_KEY, StartSim, add_key, model, state_section, write_config
from tests.e2e.robust_wire import chat_body, connect, post, read_until, until

from fairgate.config import load_config
from fairgate.core.money import Money
from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess
from fairgate.tenancy import open_tenancy
from fairgate.tenancy.actor import Actor
from fairgate.tenancy.limits import Limits

pytestmark = pytest.mark.slow

PRICES = {"input_per_mtok": 0.0, "output_per_mtok": 1.0}
"""One micro GPU-hour per completion token and nothing for the prompt: a request's
estimated cost (its ``max_tokens``) is then exactly its real cost, because the
simulator generates ``max_tokens`` tokens."""

TAGS = "x-fairgate-tags"
OPERATOR = Actor.operator("tests")


def configure(
    directory: Path,
    models: list[dict[str, Any]],
    *,
    limits: Limits | None = None,
    budgets: Sequence[tuple[str, int] | tuple[str, int, str]] = (),
    limits_section: dict[str, Any] | None = None,
    **sections: Any,
) -> Path:
    """``write_config`` in ``directory`` (created), then TEST_KEY's ``limits`` and the
    monthly ``budgets`` ((scope, micro GPU-hours[, model]), e.g. ("team:t", 50)) in its
    store; ``limits_section`` is the configuration's ``limits:``."""
    directory.mkdir(parents=True, exist_ok=True)
    if limits_section is not None:
        sections["limits"] = limits_section
    path = write_config(directory, models, **sections)
    asyncio.run(_apply(path, limits, budgets))
    return path


async def _apply(
    path: Path, limits: Limits | None, budgets: Sequence[tuple[str, int] | tuple[str, int, str]]
) -> None:
    async with open_tenancy(load_config(path)) as tenancy:
        (key,) = await tenancy.keys.list(OPERATOR, team="t")
        if limits is not None:
            await tenancy.keys.update(OPERATOR, key.id, limits=limits)
        for scope, micro, *of in budgets:
            await tenancy.budgets.set(
                OPERATOR, scope=scope, period="month", max=Money(micro), model=of[0] if of else None
            )


def body(max_tokens: int | None, model_name: str = "m") -> bytes:
    """A chat request's JSON (``max_tokens`` None: not sent); its size sets the estimate."""
    document: dict[str, Any] = {
        "model": model_name,
        "messages": [{"role": "user", "content": "hi"}],
    }
    if max_tokens is not None:
        document["max_tokens"] = max_tokens
    return orjson.dumps(document)


def estimate(max_tokens: int | None, assumed: int) -> int:
    """The gateway's token estimate of ``body(max_tokens)``: bytes / 4 plus the completion."""
    return -(-len(body(max_tokens)) // 4) + (assumed if max_tokens is None else max_tokens)


def chat(
    gateway: GatewayProcess,
    max_tokens: int | None = 4,
    *,
    tags: str | None = None,
    key: str = TEST_KEY,
    model_name: str = "m",
) -> httpx.Response:
    """One non-streamed chat completion as ``key``, with ``tags`` in the tag header."""
    sent = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    if tags is not None:
        sent[TAGS] = tags
    return httpx.post(
        gateway.url + "/v1/chat/completions",
        content=body(max_tokens, model_name),
        headers=sent,
        timeout=30,
    )


def refusal(answer: httpx.Response) -> tuple[int, str, str]:
    """(status, error code, message) of an error answer."""
    error = answer.json()["error"]
    return answer.status_code, error["code"], error["message"]


def me(gateway: GatewayProcess, key: str = TEST_KEY) -> dict[str, Any]:
    answer = httpx.get(gateway.url + "/me", headers={"authorization": f"Bearer {key}"}, timeout=30)
    assert answer.status_code == 200, answer.text
    document: dict[str, Any] = answer.json()
    return document


def passed(answer: httpx.Response) -> httpx.Response | None:
    """``answer`` if it is a 200, for ``until``."""
    return answer if answer.status_code == 200 else None


def retry_after(answer: httpx.Response) -> int:
    value = answer.headers.get("retry-after")
    assert value is not None, f"no Retry-After on {answer.status_code} {answer.text}"
    return int(value)


ASSUMED = 250  # limits.default_max_tokens of the shared gateways
BUDGETED = "u"  # the shared gateways' team with a monthly budget (GET /me shows it)
BUDGET = 1000


@dataclass(frozen=True, slots=True)
class Shared:
    """A gateway on one state back end, for the tests of one key's limits.

    Model ``m`` answers at once and ends its answers after 8 tokens (the TPM test);
    ``paced`` streams ten tokens a second (a request held in flight); ``priced`` answers
    at once and costs one micro GPU-hour per completion token. Team ``u`` has a monthly
    budget of ``BUDGET``; every test's key is its own, so no test uses up another's limits.
    """

    config: Path
    gateway: GatewayProcess
    sims: tuple[SimProcess, ...]

    def key(self, limits: Limits, team: str = "t") -> str:
        return add_key(self.config, team, limits=limits)

    def requests(self) -> int:
        """Chat completions that reached model ``m``'s engine."""
        return len(self.sims[0].requests("/v1/chat/completions"))


@pytest.fixture(scope="module", params=["memory", "redis"])
def shared(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Shared]:
    directory = tmp_path_factory.mktemp(f"shared-{request.param}")
    state = state_section(request.param, directory, request)
    with ExitStack() as stack:
        sims = (
            stack.enter_context(SimProcess("--model", "m", "--speed", "0", "--eos-after", "8")),
            stack.enter_context(SimProcess("--model", "m", "--speed", "10", "--ttft", "0")),
            stack.enter_context(SimProcess("--model", "m", "--speed", "0")),
        )
        config = write_config(
            directory,
            [
                model("m", sims[0]),
                model("paced", sims[1], upstream_model="m"),
                model("priced", sims[2], upstream_model="m", cost=PRICES),
            ],
            orgs=[{"name": "test-org", "share": 1.0, "teams": ["t", BUDGETED]}],
            limits={"default_max_tokens": ASSUMED},
            state=state,
        )
        asyncio.run(_apply(config, None, [(f"team:{BUDGETED}", BUDGET)]))
        gateway = stack.enter_context(GatewayProcess(config))
        yield Shared(config, gateway, sims)


@pytest.fixture
def gw(shared: Shared) -> Shared:
    for sim in shared.sims:
        sim.reset()
    return shared


def test_rpm_refuses_with_retry_after_and_names_the_limit(gw: Shared) -> None:
    key = gw.key(Limits(rpm=3))
    assert [chat(gw.gateway, key=key).status_code for _ in range(3)] == [200, 200, 200]
    refused = chat(gw.gateway, key=key)
    assert refusal(refused) == (
        429,
        "rpm_limit_exceeded",
        "Rate limit exceeded: this key may send 3 requests per minute.",
    )
    assert 1 <= retry_after(refused) <= 61
    assert gw.requests() == 3  # the refused one never left


def test_rpd_refuses_the_request_over_the_days_count(gw: Shared) -> None:
    key = gw.key(Limits(rpd=2))
    assert [chat(gw.gateway, key=key).status_code for _ in range(2)] == [200, 200]
    refused = chat(gw.gateway, key=key)
    status, code, message = refusal(refused)
    assert (status, code) == (429, "rpd_limit_exceeded")
    assert "this key may send 2 requests per day" in message
    assert "UTC" in message  # whose midnight ends the day
    assert 1 <= retry_after(refused) <= 86400


def test_max_in_flight_slot_comes_back_when_the_client_disconnects(gw: Shared) -> None:
    gateway, key = gw.gateway, gw.key(Limits(max_in_flight=1))
    sock = connect(gateway.host, gateway.port)
    try:
        body = chat_body(stream=True, max_tokens=500, model="paced")
        post(sock, "/v1/chat/completions", body, key=key)
        read_until(sock, lambda got: got.count(b"data: {") >= 2, timeout=30)
        busy = chat(gateway, key=key, model_name="paced")
        status, code, message = refusal(busy)
        assert (status, code) == (429, "in_flight_limit_exceeded")
        assert "this key may have 1 in flight at once" in message
        assert retry_after(busy) >= 1
    finally:
        sock.close()  # the client leaves mid-stream: its slot must come back
    answer = until(
        lambda: passed(chat(gateway, key=key, model_name="paced")),
        20,
        "a request served once the slot is released",
        0.2,
    )
    assert answer is not None and answer.json()["usage"]["completion_tokens"] == 4


def test_tpm_charges_the_estimate_and_gives_back_what_was_not_used(gw: Shared) -> None:
    # Without max_tokens the request is capped (and reserved) at the default of 250
    # completion tokens; the model ends its answer after 8, and the window keeps only
    # the real usage.
    tpm = 300
    gateway, key = gw.gateway, gw.key(Limits(tpm=tpm))
    first = chat(gateway, max_tokens=None, key=key)
    assert first.status_code == 200, first.text
    used = first.json()["usage"]["total_tokens"]
    assert used < 50
    assert me(gateway, key)["limits"]["tpm"] == {"limit": tpm, "used": used}
    # ~264 estimated again: fits only because the first estimate was corrected
    second = chat(gateway, max_tokens=None, key=key)
    assert second.status_code == 200, second.text
    window = used + second.json()["usage"]["total_tokens"]
    assert me(gateway, key)["limits"]["tpm"]["used"] == window
    assert 2 * estimate(None, ASSUMED) > tpm  # without the correction it would not have fit
    # max_tokens counts in the estimate: 280 asked does not fit next to the window,
    # where the 250 assumed without it would
    assert window + estimate(280, ASSUMED) > tpm >= window + estimate(None, ASSUMED)
    refused = chat(gateway, max_tokens=280, key=key)
    status, code, message = refusal(refused)
    assert (status, code) == (429, "tpm_limit_exceeded"), refused.text
    assert f"this key may use {tpm} tokens per minute" in message
    assert 1 <= retry_after(refused) <= 61
    assert me(gateway, key)["limits"]["tpm"]["used"] == window  # a refusal charges nothing
    fourth = chat(gateway, max_tokens=None, key=key)
    assert fourth.status_code == 200, fourth.text
    assert (
        me(gateway, key)["limits"]["tpm"]["used"] == window + fourth.json()["usage"]["total_tokens"]
    )


def test_me_shows_limits_with_their_use_and_budgets_with_their_spend(gw: Shared) -> None:
    gateway, key = gw.gateway, gw.key(Limits(rpm=50, rpd=500), team=BUDGETED)
    assert httpx.get(gateway.url + "/me", timeout=30).status_code == 401
    wrong = httpx.get(
        gateway.url + "/me", headers={"authorization": "Bearer fg-not-a-key"}, timeout=30
    )
    assert wrong.status_code == 401
    assert chat(gateway, 10, key=key, model_name="priced").status_code == 200
    assert chat(gateway, 20, key=key, model_name="priced").status_code == 200
    standing = me(gateway, key)
    assert standing["team"] == BUDGETED and standing["org"] == "test-org"
    assert standing["limits"] == {  # the /me request counts itself
        "rpm": {"limit": 50, "used": 3},
        "tpm": None,
        "rpd": {"limit": 500, "used": 3},
        "max_in_flight": None,
    }
    (budget,) = standing["budgets"]
    assert (budget["scope_kind"], budget["scope"], budget["period"]) == (
        "team",
        BUDGETED,
        "month",
    )
    assert (budget["max_micro"], budget["spent_micro"]) == (BUDGET, 30)
    assert Decimal(budget["remaining"]) == Decimal("0.000970")  # GPU-hours
    assert key not in str(standing)


def test_limits_unavailable_fails_closed_by_default_and_open_when_configured(
    tmp_path: Path, start_sim: StartSim
) -> None:
    sim = start_sim("--model", "m", "--speed", "0")
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # nothing listens here once the socket is closed
    url_file = tmp_path / "redis-url"
    url_file.write_text(f"redis://127.0.0.1:{port}/0")
    down = {"backend": "redis", "url_file": str(url_file), "timeout": "200ms"}
    closed_config = configure(
        tmp_path / "closed", [model("m", sim)], limits=Limits(rpm=100), state=down
    )
    open_config = configure(
        tmp_path / "open",
        [model("m", sim)],
        limits=Limits(rpm=100),
        state={**down, "fail_open": True},
    )
    with GatewayProcess(closed_config) as gateway:
        for _ in range(3):  # through the breaker's closed and open states alike
            answer = chat(gateway)
            status, code, message = refusal(answer)
            assert (status, code) == (503, "limits_unavailable")
            assert "rate-limit and budget service is unavailable" in message
            assert f":{port}" not in answer.text  # the back end's address stays inside
        assert len(sim.requests("/v1/chat/completions")) == 0
        # a shared dependency is down, not this gateway: the load balancer keeps it
        ready = until(
            lambda: passed(httpx.get(gateway.admin_url + "/readyz", timeout=10)),
            20,
            "ready while Redis is down",
        )
        assert ready is not None and ready.json()["ready"] is True
    with GatewayProcess(open_config) as gateway:
        assert [chat(gateway).status_code for _ in range(3)] == [200, 200, 200]


def test_tags_are_checked_and_too_many_is_refused(tmp_path: Path, start_sim: StartSim) -> None:
    sim = start_sim("--model", "m", "--speed", "0")
    many = configure(
        tmp_path / "many", [model("m", sim)], tags={"allowed": [f"t{i}" for i in range(9)]}
    )
    allowed = configure(tmp_path / "allowed", [model("m", sim)], tags={"allowed": ["a", "b"]})
    with GatewayProcess(many) as gateway:
        nine = ",".join(f"t{i}" for i in range(9))
        assert refusal(chat(gateway, tags=nine))[:2] == (400, "too_many_tags")
        assert chat(gateway, tags=",".join(f"t{i}" for i in range(8))).status_code == 200
        assert refusal(chat(gateway, tags="bad tag!"))[:2] == (400, "invalid_tag")
    with GatewayProcess(allowed) as gateway:
        assert chat(gateway, tags="a, b").status_code == 200
        status, code, message = refusal(chat(gateway, tags="a,c"))
        assert (status, code) == (400, "tag_not_allowed")
        assert "'c'" in message and TAGS in message
        assert chat(gateway).status_code == 200  # no header: nothing to check
    assert len(sim.requests("/v1/chat/completions")) == 3  # refused tags never reach the engine


def test_a_burst_on_each_side_of_a_minute_boundary_does_not_pass_twice(
    tmp_path: Path, start_sim: StartSim, redis_state: dict[str, Any]
) -> None:
    """RPM is a sliding window, on both back ends at once (one gateway each).

    The gateway's clock is the wall clock and nothing offsets it, so the test
    waits for real, about a minute at worst: a burst of the whole allowance in
    the second half of a minute, then, 31 s later and so in the next minute, a
    second burst. A fixed per-minute window would pass the second burst whole,
    a token bucket refilled for 31 s about half of it; the sliding window
    refuses all of it, with a Retry-After of the time until the first burst
    leaves it (about 30 s).
    """
    rpm = 10
    sim = start_sim("--model", "m", "--speed", "0")
    gateways = [
        GatewayProcess(
            configure(tmp_path / name, [model("m", sim)], limits=Limits(rpm=rpm), state=state)
        )
        for name, state in (("memory", {"backend": "memory"}), ("redis", redis_state))
    ]
    try:
        for gateway in gateways:
            gateway.start()
        second = time.time() % 60
        if not 30 <= second <= 55:
            time.sleep((30 - second) % 60)  # into the second half of a minute
        first_burst = time.time()
        for gateway in gateways:
            assert [chat(gateway).status_code for _ in range(rpm)] == [200] * rpm
            assert chat(gateway).status_code == 429
        assert time.time() - first_burst < 9, "the first burst took too long to be a burst"
        time.sleep(max(0.0, first_burst + 31 - time.time()))
        assert time.time() // 60 > first_burst // 60  # a fixed minute window would be empty
        for gateway in gateways:
            answers = [chat(gateway) for _ in range(rpm)]
            assert [a.status_code for a in answers] == [429] * rpm
            assert {refusal(a)[1] for a in answers} == {"rpm_limit_exceeded"}
            assert all(20 <= retry_after(a) <= 31 for a in answers), [
                a.headers.get("retry-after") for a in answers
            ]
    finally:
        for gateway in gateways:
            gateway.stop()
    assert len(sim.requests("/v1/chat/completions")) == 2 * rpm
