"""The overhead benchmark runs end to end with tiny counts and reports what it promises.

Real processes (instant upstreams, simulated engine, minimal proxies, gateways, a private
redis-server) on 127.0.0.1. No timing is asserted: only that every leg was measured,
every request succeeded, the counts are what the configuration makes them, and the JSON
carries the fields the README's figures are read from.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "overhead.py"

pytestmark = pytest.mark.slow
needs_redis_server = pytest.mark.skipif(
    shutil.which("redis-server") is None, reason="redis-server is not installed"
)


def _bench(
    *args: str, timeout: float = 240, tmpdir: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """overhead.py in a process group of its own: if it does not end (its timeout, or the
    test's), the whole group goes, so no engine or gateway it started is left running.
    ``tmpdir``: its TMPDIR, to see what it leaves behind there."""
    argv = [sys.executable, str(SCRIPT), *args]
    env = None if tmpdir is None else {**os.environ, "TMPDIR": str(tmpdir)}
    with subprocess.Popen(
        argv,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as bench:
        try:
            stdout, stderr = bench.communicate(timeout=timeout)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(bench.pid, signal.SIGKILL)  # anything of the group still there
    return subprocess.CompletedProcess(argv, bench.returncode, stdout, stderr)


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
    # the yardstick, the lean floor, and the gateway on the full path (the default)
    assert set(latency["proxies"]) == {"uvicorn+aiohttp", "uvicorn+fairgate", "gateway full/memory"}
    for leg in latency["proxies"].values():
        assert leg["errors"] == 0 and leg["first_error"] == ""
        assert leg["through"]["n"] == leg["added"]["n"] == 20
        assert leg["through"]["p50"] > 0 and leg["through"]["p99"] >= leg["through"]["p50"]
    assert latency["proxies"]["uvicorn+aiohttp"]["ratio_p50"] == 1.0
    assert {"added_p50_ratio", "added_p99_ratio"} <= set(document["targets"]["gateway full/memory"])


def test_throughput_counts_successful_requests_per_leg_on_the_bare_path() -> None:
    document = _json(
        "throughput", "--path", "bare", "--duration", "1", "--concurrency", "2", "--segments", "1"
    )

    legs = document["runs"][0]["throughput"]["legs"]
    assert set(legs) == {"direct", "uvicorn+aiohttp", "uvicorn+fairgate", "gateway bare/memory"}
    for leg in legs.values():
        assert leg["requests"] > 0 and leg["errors"] == 0
    assert legs["gateway bare/memory"]["server_cpu_us_per_request"] > 0
    assert "throughput_ratio" in document["targets"]["gateway bare/memory"]


@needs_redis_server
@pytest.mark.timeout(400)  # two gateways provisioned through the CLI, a third counted
def test_full_path_on_both_back_ends_counts_redis_round_trips_per_request() -> None:
    document = _json(
        "throughput",
        "--state", "both",
        "--duration", "1", "--concurrency", "2", "--segments", "1",
        "--count-requests", "10", "--count-idle", "0.5",
    )  # fmt: skip

    run = document["runs"][0]
    gateways = {"gateway full/memory", "gateway full/redis"}
    assert gateways <= set(run["throughput"]["legs"])
    for name in gateways:
        assert run["throughput"]["legs"][name]["requests"] > 0
        assert run["throughput"]["legs"][name]["errors"] == 0
    counted = run["redis"]
    assert counted["gateway"] == "gateway full/redis" and counted["requests"] == 10
    # Limits, budgets and the fair-share claim live in Redis: every request reaches it on
    # the way in (before its upstream saw it) and on the way out (settle). The relay reads
    # the way-in script before it forwards it, so its stamp is before the upstream's (on
    # the loop's millisecond clock they tied, and a way in was counted out); a background
    # burst (about one a second) may fall in a window too
    assert counted["raw_in"] + counted["raw_out"] >= 20
    assert sum(counted["in_histogram"].values()) == 10
    assert counted["in_histogram"].get("1", 0) >= 9, counted["in_histogram"]
    assert counted["out_per_request"] > 0
    assert counted["commands_per_request"]  # INFO commandstats moved
    assert run["redis_commands_under_load"]
    targets = document["targets"]["gateway full/redis"]
    assert {"redis_round_trips_in", "redis_round_trips_out", "throughput_ratio"} <= set(targets)
    assert targets["throughput_ratio"]["limit"] == 0.7
    assert document["targets"]["gateway full/memory"]["throughput_ratio"]["limit"] == 0.8


@pytest.mark.timeout(240)  # a gateway provisioned through the CLI
def test_streaming_runs_the_full_path_over_both_engines_and_frees_every_disconnect() -> None:
    document = _json(
        "streaming",
        "--streams", "10",
        "--burst", "6",
        "--disconnects", "4",
        "--stream-tokens", "4",
        "--token-rate", "50",
        "--stream-rounds", "2",
    )  # fmt: skip

    (streaming,) = document["runs"][0]["streaming"]
    gateway = "gateway full/memory"  # --path full, the default
    assert streaming["proxy"] == gateway
    assert (streaming["path"], streaming["state"]) == ("full", "memory")
    # two rounds of 10 streams, counted together
    assert streaming["rounds"] == 2
    assert streaming["complete"] == 20 and streaming["failed"] == 0
    completion = streaming["completions"][gateway]
    # the full path: the two replicas both served streams, each admitted within the
    # organisation's fair share (the bare path has one engine and no pool: no header)
    assert streaming["engines"] == 2 and sum(completion["engine_streams"]) == 20
    assert min(completion["engine_streams"]) > 0
    assert completion["share"] == {"within; priority=0": 20}
    # the disconnects, counted over both engines, every one freed
    assert streaming["running_before_close"] == 4
    assert streaming["freed"] is True and streaming["aborted"] == 4
    checks = document["targets"]["streaming (full/memory)"]
    assert checks["streams_complete"]["met"] is True
    assert {"ttft_p99_ratio", "cpu_per_token_ratio"} <= set(checks)
    # the burst and the CPU per token, for the gateway and the minimal proxy alike
    assert streaming["yardstick"] == "uvicorn+aiohttp"
    yardstick = streaming["completions"]["uvicorn+aiohttp"]
    assert yardstick["engine_streams"] == [20, 0] and yardstick["share"] == {}
    for name in (gateway, "uvicorn+aiohttp"):
        burst = streaming["burst"][name]
        assert burst["failed"] == 0 and burst["rounds"] >= 2
        assert 0 < burst["ttft_p50_ms"] <= burst["ttft_p99_ms"]
        # /proc counts CPU in clock ticks (10 ms): a phase of 40 tokens may read as zero
        assert streaming["completions"][name]["complete"] == 20
        assert streaming["completions"][name]["rounds"] == 2
        assert streaming["completions"][name]["cpu_seconds"] >= 0


@pytest.mark.timeout(300)  # a gateway for the measurements, one more for the streams
def test_all_prints_each_configurations_cpu_by_stage_or_why_it_could_not(tmp_path: Path) -> None:
    kept = tmp_path / "stacks"
    done = _bench(
        "all",
        "--pairs", "10", "--warmup", "2",
        "--duration", "1", "--concurrency", "2", "--segments", "1",
        "--streams", "4", "--burst", "0", "--disconnects", "2",
        "--stream-tokens", "4", "--token-rate", "50",
        "--profile-duration", "1",
        "--keep-stacks", str(kept),
        "--json", "-",
    )  # fmt: skip

    assert done.returncode == 0, done.stderr[-3000:]
    run = json.loads(done.stdout)["runs"][0]
    tables = done.stderr  # with --json -, the tables go to stderr
    assert "CPU by stage per configuration (py-spy, 1 s each" in tables
    if "no profile of the gateway configurations: " in tables:
        # py-spy missing, or ptrace refused: said in one line, and the run goes on
        assert run["profile"] == {}
    else:
        (name,) = run["profile"]
        assert name == "gateway full/memory"
        profile = run["profile"][name]
        assert profile["samples"] > 0 and profile["errors"] == 0
        assert set(profile["by_stage"]) >= {"identify", "limit", "relay", "settle", "unmapped"}
        assert f"profile of {name}: " in tables
        assert "  settle " in tables and "top self time (" in tables
        # --keep-stacks: py-spy's raw stacks stay where asked, named in the JSON and the table
        stacks = Path(profile["stacks"])
        assert stacks.parent == kept and stacks.stat().st_size > 0
        assert f"(stacks: {stacks})" in tables
    assert run["streaming"][0]["complete"] == 4 * 3  # the default: 3 rounds


def test_profile_leaves_no_stacks_behind_unless_asked_to_keep_them(tmp_path: Path) -> None:
    done = _bench(
        "profile", "--path", "bare", "--without-gateway",
        "--duration", "1", "--concurrency", "2", "--top", "3",
        "--json", "-",
        tmpdir=tmp_path,
    )  # fmt: skip

    if done.returncode != 0 and "py-spy" in done.stderr:
        pytest.skip(f"py-spy cannot sample here: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr[-3000:]
    profiles = json.loads(done.stdout)["runs"][0]["profile"]
    assert profiles and all(p["samples"] > 0 and "stacks" not in p for p in profiles.values())
    assert "raw stacks in" not in done.stderr
    # py-spy wrote its files under TMPDIR; the run removed them when it ended
    assert list(tmp_path.iterdir()) == []


def test_streaming_on_the_bare_path_keeps_one_engine_and_its_label() -> None:
    document = _json(
        "streaming", "--path", "bare",
        "--streams", "6", "--burst", "0", "--disconnects", "2",
        "--stream-tokens", "4", "--token-rate", "50",
    )  # fmt: skip

    (streaming,) = document["runs"][0]["streaming"]
    assert streaming["proxy"] == "gateway bare/memory" and streaming["engines"] == 1
    assert streaming["complete"] == 6 * 3 and streaming["freed"] is True
    assert streaming["completions"]["gateway bare/memory"]["share"] == {}
    assert document["targets"]["streaming (bare/memory)"]["streams_complete"]["met"] is True


def test_a_proxy_that_cannot_start_fails_the_run_with_its_reason(tmp_path: Path) -> None:
    broken = tmp_path / "gateway.yaml"
    broken.write_text("listen: {host: 127.0.0.1, port: 0}\nmodels: []\n")

    done = _bench("latency", "--pairs", "5", "--gateway-config", str(broken))

    assert done.returncode != 0
    assert "gateway full/memory did not become ready" in done.stderr


def test_a_gateway_that_refuses_the_requests_fails_the_run_loudly() -> None:
    done = _bench("latency", "--pairs", "5", "--api-key", "fg-not-a-key")

    assert done.returncode != 0
    assert "gateway full/memory answered 401" in done.stderr


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.mark.timeout(300)
def test_compare_measures_another_gateway_as_a_leg(tmp_path: Path) -> None:
    """A second fairgate, started here in front of the benchmark's upstream port."""
    port = _free_port()
    config = tmp_path / "other.yaml"
    config.write_text(
        "listen: {host: 127.0.0.1, port: 0}\nadmin_listen: {host: 127.0.0.1, port: 0}\n"
        "logging: {level: warning}\nhealth: {interval: 1s}\n"
        'store: {url: "sqlite:///other.db"}\n'
        "orgs: [{name: o, share: 1.0, teams: [t]}]\n"
        "models:\n  - name: sim-model\n    engine: vllm\n"
        f'    upstreams: [{{name: u, url: "http://127.0.0.1:{port}"}}]\n'
    )
    fairgate = [sys.executable, "-m", "fairgate"]
    made = subprocess.run(
        [*fairgate, "keys", "create", "--team", "t", "--json", "-c", str(config)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    secret = json.loads(made.stdout)[0]["secret"]
    other = subprocess.Popen(
        [*fairgate, "serve", "-c", str(config)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert other.stdout is not None
        ready = other.stdout.readline()
        url = ready.split("listening on ")[1].split()[0]

        document = _json(
            "throughput", "--path", "bare", "--duration", "1", "--concurrency", "2",
            "--segments", "1", "--upstream-port", str(port),
            "--compare", url, "--compare-auth", f"Bearer {secret}",
        )  # fmt: skip
    finally:
        other.terminate()
        other.wait(10)
        if other.stdout is not None:
            other.stdout.close()

    legs = document["runs"][0]["throughput"]["legs"]
    assert legs["compare"]["requests"] > 0 and legs["compare"]["errors"] == 0
    assert legs["compare"]["ratio"] > 0
    assert "req/s ×compare" in document["targets"]["gateway bare/memory"]


@needs_redis_server
@pytest.mark.timeout(400)  # two gateways provisioned through the CLI, a third counted
def test_workers_mode_measures_each_worker_count_and_every_worker_serves() -> None:
    document = _json(
        "throughput",
        "--state", "redis", "--workers", "2",
        "--duration", "2", "--concurrency", "16", "--segments", "1",
        "--count-requests", "10", "--count-idle", "0.5",
    )  # fmt: skip
    run = document["runs"][0]
    rows = {row["workers"]: row for row in run["workers"]}
    assert set(rows) == {1, 2}
    assert {"gateway full/redis", "gateway full/redis, 2 workers"} <= set(run["throughput"]["legs"])
    for workers, row in rows.items():
        assert row["rps"] > 0
        assert run["throughput"]["legs"][row["gateway"]]["errors"] == 0
        # each worker listens on its own socket (SO_REUSEPORT): the kernel spreads the 16
        # keep-alive connections over both, so both processes do a share of the work
        assert row["busy_processes"] == workers
        assert row["redis_cpu_us_per_request"] > 0
        assert row["one_redis_core_ceiling_rps"] > 0
