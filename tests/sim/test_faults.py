"""Fault injection: the plan each request takes, and every fault kind on a real process."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator

import httpx
import pytest

from fairgate.core.errors import BadRequest
from fairgate.sim.config import FaultSettings
from fairgate.sim.faults import FaultPlan, Faults
from fairgate.sim.process import SimProcess

CHAT = {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6}
STREAM = {**CHAT, "stream": True}


def test_nothing_armed_is_a_healthy_plan() -> None:
    assert Faults().take(streaming=True) == FaultPlan()


def test_fail_next_counts_requests_and_takes_precedence() -> None:
    faults = Faults()
    faults.arm({"fail_next": 2, "fail_status": 429, "stall_before_headers": 1.5})
    assert faults.take(streaming=False).fail_status == 429
    assert faults.take(streaming=False).fail_status == 429
    third = faults.take(streaming=False)
    assert third.fail_status is None and third.stall_before_headers == 1.5
    assert faults.take(streaming=False) == FaultPlan()


def test_times_arms_a_stall_for_that_many_requests_or_for_ever() -> None:
    faults = Faults()
    faults.arm({"stall_before_first_token": 0.5, "times": 2})
    assert [faults.take(streaming=False).stall_before_first_token for _ in range(3)] == [
        0.5,
        0.5,
        0,
    ]
    faults.arm({"stall_before_first_token": 0.5, "times": -1})
    assert all(faults.take(streaming=False).stall_before_first_token == 0.5 for _ in range(50))
    faults.arm({"stall_before_first_token": 0})
    assert not faults.armed


def test_mid_stream_faults_wait_for_a_streaming_request() -> None:
    faults = Faults()
    faults.arm({"close_mid_stream": 3, "stall_mid_stream": 2.0, "stall_mid_stream_after": 4})
    assert faults.take(streaming=False).close_mid_stream is None
    plan = faults.take(streaming=True)
    assert plan.close_mid_stream == 3
    assert plan.stall_mid_stream == 2.0 and plan.stall_mid_stream_after == 4
    assert faults.take(streaming=True).close_mid_stream is None


def test_start_up_faults_apply_to_every_request_and_reset_restores_them() -> None:
    faults = Faults(FaultSettings(stall_before_headers=0.25, fail_next=1))
    assert faults.take(streaming=False).fail_status == 503
    assert faults.take(streaming=False).stall_before_headers == 0.25
    faults.arm({"stall_before_headers": 0})
    faults.reset()
    assert faults.take(streaming=False).fail_status == 503


@pytest.mark.parametrize(
    "spec",
    [
        {"fail_status": 200},
        {"fail_next": -1},
        {"stall_before_headers": "soon"},
        {"times": -2},
        {"explode": True},
    ],
)
def test_bad_specs_change_nothing(spec: dict[str, object]) -> None:
    faults = Faults()
    with pytest.raises(BadRequest):
        faults.arm(spec)
    assert not faults.armed


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with SimProcess("--speed", "100", "--ttft", "0") as process:
        yield process


@pytest.fixture
def http(sim: SimProcess) -> Iterator[httpx.Client]:
    sim.reset()
    with httpx.Client(base_url=sim.url, timeout=30) as client:
        yield client


def _events(response: httpx.Response) -> Iterator[tuple[float, str]]:
    for line in response.iter_lines():
        if line.startswith("data: "):
            yield time.monotonic(), line[6:]


@pytest.mark.slow
def test_fail_next_answers_the_status_then_recovers(sim: SimProcess, http: httpx.Client) -> None:
    sim.faults(fail_next=2, fail_status=429)
    assert http.get("/health").status_code == 200  # probes do not take faults
    first = http.post("/v1/chat/completions", json=CHAT)
    assert first.status_code == 429
    assert first.json()["error"]["code"] == 429
    assert (
        http.post("/v1/completions", json={"model": "sim-model", "prompt": "x"}).status_code == 429
    )
    assert http.post("/v1/chat/completions", json=CHAT).status_code == 200


@pytest.mark.slow
def test_stall_before_headers(sim: SimProcess, http: httpx.Client) -> None:
    sim.faults(stall_before_headers=1.0)
    started = time.monotonic()
    with http.stream("POST", "/v1/chat/completions", json=STREAM) as response:
        headers_after = time.monotonic() - started
        assert response.status_code == 200
        assert len(list(_events(response))) == 8  # role, 6 tokens, [DONE]
    assert headers_after >= 1.0


@pytest.mark.slow
def test_stall_before_first_token(sim: SimProcess, http: httpx.Client) -> None:
    sim.faults(stall_before_first_token=1.0)
    with http.stream("POST", "/v1/chat/completions", json=STREAM) as response:
        headers_at = time.monotonic()
        events = list(_events(response))
    assert events[0][0] - headers_at >= 0.9
    assert events[-1][1] == "[DONE]"


@pytest.mark.slow
def test_stall_mid_stream(sim: SimProcess, http: httpx.Client) -> None:
    sim.faults(stall_mid_stream=1.0, stall_mid_stream_after=3)
    with http.stream("POST", "/v1/chat/completions", json=STREAM) as response:
        events = list(_events(response))
    times = [t for t, _ in events]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # role + 3 tokens arrive, then the pause, then the rest and [DONE]
    assert gaps.index(max(gaps)) == 3
    assert max(gaps) >= 0.9
    assert events[-1][1] == "[DONE]"


@pytest.mark.slow
def test_close_mid_stream_drops_the_connection_and_frees_the_sequence(
    sim: SimProcess, http: httpx.Client
) -> None:
    sim.faults(close_mid_stream=3)
    received: list[str] = []
    with (
        pytest.raises(httpx.RemoteProtocolError),
        http.stream("POST", "/v1/chat/completions", json=STREAM) as response,
    ):
        for _, data in _events(response):
            received.append(data)
    assert len(received) == 4  # the role chunk and three tokens, no [DONE]
    assert "[DONE]" not in received
    stats = sim.stats()
    assert stats["aborted"] == 1 and stats["running"] == 0 and stats["kv_blocks_used"] == 0
    assert http.post("/v1/chat/completions", json=STREAM).text.endswith("data: [DONE]\n\n")


@pytest.mark.slow
def test_metrics_delay(sim: SimProcess, http: httpx.Client) -> None:
    sim.faults(metrics_delay=1.0)
    started = time.monotonic()
    assert http.get("/metrics").status_code == 200
    assert time.monotonic() - started >= 1.0
    assert sim.faults(metrics_delay=0)["metrics_delay"] == 0


@pytest.mark.slow
def test_bad_fault_body_is_400(http: httpx.Client) -> None:
    answer = http.post("/sim/faults", json={"fail_next": "many"})
    assert answer.status_code == 400
    assert http.get("/sim/faults").json()["fail_next"] == 0


@pytest.mark.slow
def test_flags_arm_faults_at_start_up() -> None:
    with (
        SimProcess(
            "--speed", "0", "--fail-next", "1", "--fail-status", "502", "--close-mid-stream", "2"
        ) as sim,
        httpx.Client(base_url=sim.url, timeout=30) as http,
    ):
        assert http.post("/v1/chat/completions", json=CHAT).status_code == 502
        assert http.post("/v1/chat/completions", json=CHAT).status_code == 200
        for _ in range(2):  # every stream, in instant mode too
            with (
                pytest.raises(httpx.RemoteProtocolError),
                http.stream("POST", "/v1/chat/completions", json=STREAM) as response,
            ):
                list(response.iter_lines())
