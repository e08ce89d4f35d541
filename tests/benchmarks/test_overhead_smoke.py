"""The overhead benchmark runs end to end with tiny counts and reports what it promises.

Real processes (instant upstream, simulated engine, minimal proxy, gateway) on 127.0.0.1.
No timing is asserted: only that every leg was measured, every request succeeded, and
the JSON carries the fields the README's figures are read from.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "overhead.py"

pytestmark = pytest.mark.slow


def _bench(*args: str, timeout: float = 150) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _json(*args: str) -> dict[str, Any]:
    done = _bench(*args, "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def test_latency_measures_every_leg_and_the_ratios() -> None:
    document = _json("latency", "--pairs", "20", "--warmup", "5")

    machine = document["machine"]
    assert "overhead.py latency --pairs 20" in machine["command"]
    assert machine["cores"] >= 1 and machine["cpu"] and machine["python"]
    assert {"uvicorn", "aiohttp", "fairgate"} <= set(machine["libraries"])
    latency = document["runs"][0]["latency"]
    assert latency["rounds"] == 20 and latency["direct"]["n"] == 20
    assert latency["direct_errors"] == 0
    assert set(latency["proxies"]) == {"uvicorn+aiohttp", "gateway"}
    for leg in latency["proxies"].values():
        assert leg["errors"] == 0
        assert leg["through"]["n"] == leg["added"]["n"] == 20
        assert leg["through"]["p50"] > 0 and leg["through"]["p99"] >= leg["through"]["p50"]
    assert latency["proxies"]["uvicorn+aiohttp"]["ratio_p50"] == 1.0
    assert {"added_p50_ratio", "added_p99_ratio"} <= set(document["targets"])


def test_throughput_counts_successful_requests_per_leg() -> None:
    document = _json("throughput", "--duration", "1", "--concurrency", "2", "--segments", "1")

    legs = document["runs"][0]["throughput"]["legs"]
    assert set(legs) == {"direct", "uvicorn+aiohttp", "gateway"}
    for leg in legs.values():
        assert leg["requests"] > 0 and leg["errors"] == 0
    assert legs["gateway"]["server_cpu_us_per_request"] > 0
    assert "throughput_ratio" in document["targets"]


def test_streaming_completes_every_stream_and_frees_every_disconnect() -> None:
    document = _json(
        "streaming",
        "--streams", "10",
        "--burst", "6",
        "--disconnects", "3",
        "--stream-tokens", "4",
        "--token-rate", "50",
    )  # fmt: skip

    streaming = document["runs"][0]["streaming"]
    assert streaming["proxy"] == "gateway"
    assert streaming["complete"] == 10 and streaming["failed"] == 0
    assert streaming["running_before_close"] == 3
    assert streaming["freed"] is True
    assert document["targets"]["streams_complete"]["met"] is True
    # the burst and the CPU per token, for the gateway and the minimal proxy alike
    assert streaming["yardstick"] == "uvicorn+aiohttp"
    for name in ("gateway", "uvicorn+aiohttp"):
        burst = streaming["burst"][name]
        assert burst["failed"] == 0 and burst["rounds"] >= 2
        assert 0 < burst["ttft_p50_ms"] <= burst["ttft_p99_ms"]
        completion = streaming["completions"][name]
        assert completion["complete"] == 10 and completion["cpu_us_per_token"] > 0
    assert {"ttft_p99_ratio", "cpu_per_token_ratio"} <= set(document["targets"])


def test_a_proxy_that_cannot_start_fails_the_run_with_its_reason(tmp_path: Path) -> None:
    broken = tmp_path / "gateway.yaml"
    broken.write_text("listen: {host: 127.0.0.1, port: 0}\nmodels: []\n")

    done = _bench("latency", "--pairs", "5", "--gateway-config", str(broken))

    assert done.returncode != 0
    assert "gateway did not become ready" in done.stderr
