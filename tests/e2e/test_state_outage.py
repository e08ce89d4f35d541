"""Redis unreachable: limits fail closed (or open), readiness stays, /healthz says so."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from tests.e2e.conftest import AUTH, StartGateway, StartSim, add_key, model

from fairgate.tenancy.limits import Limits
from redis_server import private_redis_server

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}


@pytest.mark.parametrize("fail_open", [False, True])
def test_an_unreachable_state_back_end(
    start_sim: StartSim, start_gateway: StartGateway, tmp_path: Path, fail_open: bool
) -> None:
    url_file = tmp_path / "redis-url"
    url_file.write_text("redis://127.0.0.1:1/0")  # nothing listens there
    sim = start_sim("--model", "m", "--speed", "0")
    gw = start_gateway(
        [model("m", sim)],
        state={"backend": "redis", "url_file": str(url_file), "fail_open": fail_open},
    )
    limited = {"authorization": "Bearer " + add_key(gw.config, "t", limits=Limits(rpm=100))}
    answer = httpx.post(gw.url + "/v1/chat/completions", json=BODY, headers=limited, timeout=30)
    if fail_open:
        assert answer.status_code == 200
    else:
        assert answer.status_code == 503
        error = answer.json()["error"]
        assert error["code"] == "limits_unavailable"
        assert "rate-limit and budget service is unavailable" in error["message"]
        assert "127.0.0.1:1" not in answer.text  # the back end's address stays server-side
    health = httpx.get(gw.admin_url + "/healthz", timeout=10)
    assert health.status_code == 200
    assert health.json()["state"] == {"backend": "redis", "available": False}
    # every replica would fail alike: readiness does not empty the fleet
    assert httpx.get(gw.admin_url + "/readyz", timeout=10).status_code == 200
    metrics = httpx.get(gw.admin_url + "/metrics", timeout=10).text
    outcome = "served_without_limits" if fail_open else "refused"
    assert f'fairgate_limits_state_unavailable_total{{outcome="{outcome}"}} 1.0' in metrics
    assert "fairgate_state_available 0.0" in metrics
    assert "fairgate_accounting_duplicates_total 0.0" in metrics
    assert "fairgate_accounting_queue " in metrics


def test_a_redis_that_may_evict_the_counters_is_named_in_the_log_at_start(
    start_sim: StartSim, start_gateway: StartGateway, tmp_path: Path
) -> None:
    """An operator whose Redis evicts keys under memory pressure (a cache's settings) is
    told at start: an evicted counter would let limits and budgets be overshot silently."""
    evicting = ("--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")
    with private_redis_server(extra=evicting) as server:
        url_file = tmp_path / "redis-url"
        url_file.write_text(server.url)
        sim = start_sim("--model", "m", "--speed", "0")
        log = tmp_path / "gateway.log"
        gw = start_gateway(
            [model("m", sim)], stderr=log, state={"backend": "redis", "url_file": str(url_file)}
        )
        answer = httpx.post(gw.url + "/v1/chat/completions", json=BODY, headers=AUTH, timeout=30)
        assert answer.status_code == 200  # a warning, not a refusal to serve
        gw.stop()
    lines = [line for line in log.read_text().splitlines() if "may evict" in line]
    assert len(lines) == 1 and "WARNING" in lines[0]
    assert "maxmemory-policy allkeys-lru" in lines[0] and "noeviction" in lines[0]
