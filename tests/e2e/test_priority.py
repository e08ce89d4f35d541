"""The fair-share priority reaches vLLM as X-Vllm-Priority, read back from the simulator."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
from tests.e2e.conftest import AUTH, StartGateway, StartSim, model

MASTER = "fg-master-" + "x" * 32
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def priorities(sim_requests: list[dict[str, object]]) -> list[str | None]:
    found = []
    for request in sim_requests:
        headers = dict(request["headers"])  # type: ignore[call-overload]
        found.append(headers.get("x-vllm-priority"))
    return found


def test_within_share_then_borrowing_priority_reaches_the_engine(
    start_sim: StartSim, start_gateway: StartGateway, tmp_path: Path
) -> None:
    master = tmp_path / "master-key"
    master.write_text(MASTER)
    sim = start_sim("--model", "m", "--speed", "20", "--ttft", "0")
    gw = start_gateway(
        [model("m", sim, pool="p", cost={"input_per_mtok": 1.0, "output_per_mtok": 2.0})],
        pools=[{"name": "p", "capacity": 1}],  # the org's reservation: one request
        master_key_file=str(master),
    )
    # one long request holds the reservation while a second one is sent
    started = threading.Event()

    def long_request() -> None:
        with httpx.stream(
            "POST",
            gw.url + "/v1/chat/completions",
            json={**BODY, "max_tokens": 40, "stream": True},
            headers=AUTH,
            timeout=60,
        ) as answer:
            for _ in answer.iter_lines():
                started.set()

    worker = threading.Thread(target=long_request)
    worker.start()
    assert started.wait(30)
    second = httpx.post(
        gw.url + "/v1/chat/completions", json={**BODY, "max_tokens": 1}, headers=AUTH, timeout=60
    )
    worker.join(60)
    assert second.status_code == 200
    third = httpx.post(
        gw.url + "/v1/chat/completions", json={**BODY, "max_tokens": 1}, headers=AUTH, timeout=60
    )
    assert third.status_code == 200
    # within share (0), borrowing at rank 0 (10), within share again once the first ended
    assert priorities(sim.requests(path="/v1/chat/completions")) == ["0", "10", "0"]
    metrics = httpx.get(gw.admin_url + "/metrics", timeout=10).text
    assert 'fairgate_fairshare_requests_total{kind="borrowing",org="test-org",pool="p"} 1.0' in (
        metrics
    )
    # the organisation's standing: its reservation, nothing in flight now, usage charged
    report = httpx.get(
        gw.admin_url + "/admin/fairshare",
        headers={"authorization": f"Bearer {MASTER}"},
        timeout=10,
    ).json()
    (pool,) = report["pools"]
    org = next(o for o in pool["orgs"] if o["org"] == "test-org")
    assert org["reservation"] == 1 and org["within_share_in_flight"] == 0
    assert org["usage"] > 0


def test_send_priority_false_keeps_the_header_away(
    start_sim: StartSim, start_gateway: StartGateway
) -> None:
    sim = start_sim("--model", "m", "--speed", "0", "--scheduling-policy", "fcfs")
    gw = start_gateway(
        [model("m", sim, pool="p")],
        pools=[{"name": "p", "capacity": 1}],
        fairshare={"send_priority": False},
    )
    answer = httpx.post(
        gw.url + "/v1/chat/completions", json={**BODY, "max_tokens": 1}, headers=AUTH, timeout=60
    )
    assert answer.status_code == 200
    assert priorities(sim.requests(path="/v1/chat/completions")) == [None]
