"""benchmarks/hotspots.py: each frame of today's request path goes to its stage.

The stacks are written as py-spy writes them (``function (file:line)``, outermost
first). The pipeline is covered in both its shapes: the stages as functions of
``proxy/pipeline.py`` (``_identify``, ``_scan_headers``, ``_read``) and as objects of
their own modules (``proxy/identify.py``, ``proxy/read.py``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import hotspots

HANDLE = ("Pipeline.handle", "fairgate/proxy/pipeline.py")
ASGI = ("ProxyApp.__call__", "fairgate/proxy/asgi.py")
CYCLE = ("RequestResponseCycle.run_asgi", "uvicorn/protocols/http/httptools_impl.py")
SETTLE = ("Settler.settle", "fairgate/proxy/settle.py")
FORWARD = ("Forwarder.forward", "fairgate/proxy/forward.py")
ATTEMPT = ("Forwarder._attempt", "fairgate/proxy/forward.py")
LIMIT_ENTER = ("Limit.enter", "fairgate/proxy/limit.py")
GIVE_BACK = ("Settler._give_back", "fairgate/proxy/settle.py")
READ_BODY = ("read_body", "fairgate/proxy/request.py")
RESERVATION = "fairgate/proxy/reservation.py"
HTTP1 = "fairgate/upstream/http1.py"


def _path(*frames: tuple[str, str]) -> list[tuple[str, str]]:
    """A sample under the request's task: uvicorn, the ASGI app, the pipeline."""
    return [CYCLE, ASGI, HANDLE, *frames]


@pytest.mark.parametrize(
    ("frames", "stage"),
    [
        # identify: auth, the route-class rule, the pipeline's own functions or Identify
        (_path(("Authenticator.authenticate", "fairgate/auth/authenticator.py")), "identify"),
        (_path(("Pipeline._identify", "fairgate/proxy/pipeline.py")), "identify"),
        (_path(("Pipeline._scan_headers", "fairgate/proxy/pipeline.py")), "identify"),
        (_path(("Identify.enter", "fairgate/proxy/identify.py")), "identify"),
        (_path(("ClientAddresses.of", "fairgate/core/client_addr.py")), "identify"),
        # read: the body, the model, the reservation, the request policy, tags, salt
        (_path(("Pipeline._read", "fairgate/proxy/pipeline.py")), "read"),
        (_path(("Pipeline._read_body", "fairgate/proxy/pipeline.py")), "read"),
        (_path(("Read.body", "fairgate/proxy/read.py"), READ_BODY), "read"),
        (_path(("Read.head", "fairgate/proxy/read.py")), "read"),
        (_path(("OutputPolicy.reserve", RESERVATION)), "read"),
        (_path(("OutputPolicy.reserve.<locals>.<genexpr>", RESERVATION)), "read"),
        (_path(("bound", "fairgate/engines/output.py")), "read"),
        (_path(("ModelEntry.check_fields", "fairgate/proxy/endpoints.py")), "read"),
        (_path(("RequestPolicy.check", "fairgate/engines/policy.py")), "read"),
        (_path(("TagPolicy.apply", "fairgate/proxy/tags.py")), "read"),
        (_path(("CacheSalter.__call__", "fairgate/proxy/salt.py")), "read"),
        (_path(("ResponseScope.check", "fairgate/proxy/responses.py")), "read"),
        # limit: the stage, the limiter, the counter store's acquire
        (_path(LIMIT_ENTER), "limit"),
        (_path(LIMIT_ENTER, ("Planner.plan", "fairgate/limits/plan.py")), "limit"),
        (
            _path(
                LIMIT_ENTER,
                ("Limiter.admit", "fairgate/limits/limiter.py"),
                ("MemoryCounterStore._acquire", "fairgate/state/memory.py"),
            ),
            "limit",
        ),
        (_path(("Limit.check_head", "fairgate/proxy/limit.py")), "limit"),
        (_path(("RedisCounterStore.acquire", "fairgate/state/redis.py")), "limit"),
        # admit: the lease, the claim (also when it rides in the limit stage's call)
        (_path(("Admit.enter", "fairgate/proxy/admit.py")), "admit"),
        (_path(("AdmissionController.try_admit", "fairgate/admission/controller.py")), "admit"),
        (_path(LIMIT_ENTER, ("MemoryCounterStore._claim", "fairgate/state/memory.py")), "admit"),
        (_path(LIMIT_ENTER, ("RedisCounterStore._claim_call", "fairgate/state/redis.py")), "admit"),
        (_path(("Dispatcher.wait", "fairgate/proxy/dispatch.py")), "admit"),
        # route: the registry, the router, the tries, the replica's lease
        (_path(FORWARD), "route"),
        (_path(FORWARD, ("Forwarder._tries", "fairgate/proxy/forward.py")), "route"),
        (_path(FORWARD, ("ReplicaRegistry.pick", "fairgate/upstream/registry.py")), "route"),
        (_path(FORWARD, ("route", "fairgate/routing/pipeline.py")), "route"),
        (_path(FORWARD, ("routing_inputs", "fairgate/proxy/affinity.py")), "route"),
        (_path(FORWARD, ATTEMPT, ("_Lease.__enter__", "fairgate/upstream/registry.py")), "route"),
        (_path(FORWARD, ("Settler.retried", "fairgate/proxy/settle.py")), "route"),
        # relay: the attempt, the engine's body and headers, the answer and its usage
        (_path(FORWARD, ATTEMPT), "relay"),
        (_path(FORWARD, ATTEMPT, ("Candidate.body_for", "fairgate/proxy/endpoints.py")), "relay"),
        (
            _path(
                FORWARD,
                ATTEMPT,
                ("Candidate.body_for", "fairgate/proxy/endpoints.py"),
                ("VllmAdapter.prepare_body", "fairgate/engines/vllm.py"),
                ("UpstreamRequestBody.json_object", "fairgate/engines/body.py"),
            ),
            "relay",
        ),
        (_path(FORWARD, ATTEMPT, ("upstream_headers", "fairgate/engines/headers.py")), "relay"),
        (_path(FORWARD, ATTEMPT, ("Relay.send_whole", "fairgate/proxy/relay.py")), "relay"),
        (_path(FORWARD, ATTEMPT, ("usage_in_body", "fairgate/proxy/usage.py")), "relay"),
        (_path(FORWARD, ATTEMPT, ("SseSplitter.feed", "fairgate/proxy/sse.py")), "relay"),
        (_path(FORWARD, ATTEMPT, ("share_headers", "fairgate/proxy/forward.py")), "relay"),
        (_path(FORWARD, ATTEMPT, ("share_header", "fairgate/proxy/share.py")), "relay"),
        # settle: the stage, the way out of limit and admit, the record, the journal
        (_path(SETTLE), "settle"),
        (_path(SETTLE, ("RecordBuilder.__call__", "fairgate/proxy/records.py")), "settle"),
        (_path(SETTLE, ("charge", "fairgate/proxy/reservation.py")), "settle"),
        (_path(SETTLE, GIVE_BACK, ("Limit.leave", "fairgate/proxy/limit.py")), "settle"),
        (_path(SETTLE, GIVE_BACK, ("Admit.leave", "fairgate/proxy/admit.py")), "settle"),
        (_path(SETTLE, GIVE_BACK, ("Admit._give_back", "fairgate/proxy/admit.py")), "settle"),
        (_path(SETTLE, GIVE_BACK, ("Admit.finish", "fairgate/proxy/admit.py")), "settle"),
        (_path(SETTLE, GIVE_BACK, ("Lease.release", "fairgate/admission/lease.py")), "settle"),
        (_path(SETTLE, GIVE_BACK, ("Limiter.settle", "fairgate/limits/limiter.py")), "settle"),
        (_path(SETTLE, ("MemoryCounterStore._settle", "fairgate/state/memory.py")), "settle"),
        (_path(SETTLE, ("MemoryCounterStore._charge_usage", "fairgate/state/memory.py")), "settle"),
        (_path(SETTLE, ("_settle_fields", "fairgate/state/redis.py")), "settle"),
        (_path(SETTLE, ("Prices.cost_of", "fairgate/accounting/cost.py")), "settle"),
        (_path(SETTLE, ("Recorder.record", "fairgate/accounting/recorder.py")), "settle"),
        (
            _path(
                SETTLE,
                ("Recorder.record", "fairgate/accounting/recorder.py"),
                ("Journal.append", "fairgate/accounting/journal.py"),
                ("encode", "fairgate/accounting/journal.py"),
            ),
            "settle",
        ),
        # the pipeline's own code between the stages
        (_path(), "pipeline"),
        (_path(("__create_fn__.<locals>.__init__", "<string>")), "pipeline"),
        (_path(("_request_ids.<locals>.next_id", "fairgate/app.py")), "pipeline"),
        # the server
        ([CYCLE, ASGI], "server"),
        ([("RequestResponseCycle.send", "uvicorn/protocols/http/httptools_impl.py")], "server"),
        ([("_LimitedProtocol.data_received", "fairgate/server/protocol.py")], "server"),
        # the upstream client, under the relay or not
        (_path(FORWARD, ATTEMPT, ("Http1Connection.send", HTTP1)), "upstream client"),
        ([("Http1Connection.data_received", HTTP1)], "upstream client"),
    ],
)  # fmt: skip
def test_each_frame_of_the_request_path_goes_to_its_stage(
    frames: list[tuple[str, str]], stage: str
) -> None:
    assert hotspots.stage_of(frames) == stage


def test_talking_to_redis_is_the_state_client_whichever_stage_asked() -> None:
    acquire = ("RedisCounterStore.acquire", "fairgate/state/redis.py")
    call = ("RedisCounterStore._call", "fairgate/state/redis.py")
    pack = ("Script.pack", "fairgate/state/scripts.py")
    assert hotspots.stage_of(_path(LIMIT_ENTER, acquire, call, pack)) == "state client"
    assert hotspots.stage_of(_path(LIMIT_ENTER, acquire)) == "limit"
    # the pipe's own task, the reply parser, and redis-py
    assert hotspots.stage_of([("ScriptPipe._read", "fairgate/state/scripts.py")]) == "state client"
    assert hotspots.stage_of([("parse", "fairgate/state/replies.py")]) == "state client"
    redis_py = ("Connection.read_response", "redis/asyncio/connection.py")
    assert hotspots.stage_of(_path(SETTLE, redis_py)) == "state client"
    # a key name is its caller's: the settle's
    settle = ("RedisCounterStore.settle", "fairgate/state/redis.py")
    key = ("RedisCounterStore._slot_key", "fairgate/state/redis.py")
    assert hotspots.stage_of(_path(SETTLE, settle, key)) == "settle"


def test_the_accounting_writer_is_the_batch_and_sqlite_in_its_thread() -> None:
    run = ("Recorder._run", "fairgate/accounting/recorder.py")
    write = ("StoreUsageWriter.write", "fairgate/accounting/store_writer.py")
    sqlalchemy = ("Connection._execute_context", "sqlalchemy/engine/base.py")
    assert hotspots.stage_of([run, write, sqlalchemy]) == "accounting writer"
    assert hotspots.stage_of([run, ("Journal.settle", "fairgate/accounting/journal.py")]) == (
        "accounting writer"
    )
    thread = [
        ("Thread._bootstrap", "threading.py"),
        ("_connection_worker_thread", "aiosqlite/core.py"),
    ]
    assert hotspots.stage_of(thread) == "accounting writer"


def test_helpers_every_stage_calls_go_to_their_caller() -> None:
    responded = ("Exchange.responded", "fairgate/proxy/exchange.py")
    assert hotspots.stage_of(_path(FORWARD, ATTEMPT, responded)) == "relay"
    assert hotspots.stage_of(_path(SETTLE, responded)) == "settle"
    tokens = ("Reservation.tokens", "fairgate/proxy/exchange.py")
    assert hotspots.stage_of(_path(LIMIT_ENTER, tokens)) == "limit"
    plus = ("Usage.plus", "fairgate/proxy/usage.py")
    assert hotspots.stage_of(_path(SETTLE, ("charge", RESERVATION), plus)) == "settle"
    assert hotspots.stage_of(_path(FORWARD, ATTEMPT, plus)) == "relay"
    estimate = ("estimate_tokens", "fairgate/limits/estimate.py")
    assert hotspots.stage_of(_path(LIMIT_ENTER, tokens, estimate)) == "limit"
    timeout = ("Timeout.__aexit__", "asyncio/timeouts.py")
    assert hotspots.stage_of(_path(("read_body", "fairgate/proxy/request.py"), timeout)) == "read"
    # a metric counted in a stage is the stage's; alone, the loop's
    inc = ("LoopCounter.inc", "fairgate/observability/loop_metrics.py")
    assert hotspots.stage_of(_path(SETTLE, inc)) == "settle"
    assert hotspots.stage_of([inc]) == "other"
    assert hotspots.stage_of([timeout]) == "other"


def test_a_request_path_module_no_row_names_is_unmapped_by_name() -> None:
    frames = _path(("Shaper.enter", "fairgate/proxy/shaper.py"))
    assert hotspots.stage_of(frames) == "unmapped"
    spots = hotspots.parse(";".join(f"{f} ({p}:1)" for f, p in frames) + " 7\n")
    assert spots.by_stage["unmapped"] == 7
    assert spots.unmapped == {"fairgate.proxy:Shaper.enter": 7}
    assert hotspots.stage_of([("mystery", "elsewhere.py")]) == "unmapped"


def test_parse_keeps_what_runs_on_the_loop_and_sums_stages() -> None:
    above = "_run_module_as_main (<frozen runpy>:198);run (asyncio/runners.py:190)"
    text = "\n".join(
        [
            f"{above};Pipeline.handle (fairgate/proxy/pipeline.py:140);"
            "Limit.enter (fairgate/proxy/limit.py:120) 6",
            f"{above};Pipeline.handle (fairgate/proxy/pipeline.py:170);"
            "Settler.settle (fairgate/proxy/settle.py:80) 3",
            f"{above} 1",  # the loop's own C code
            "not a stack line",
        ]
    )
    spots = hotspots.parse(text)

    assert spots.total == 10
    assert spots.by_stage == {"limit": 6, "settle": 3, "other": 1}
    assert spots.self_by_function["fairgate.proxy:Limit.enter"] == 6
    table = spots.stage_table(us_per_request=100.0)
    assert "  limit               60.0%    60.0 µs" in table
    top = spots.top_self(2, us_per_request=100.0)
    assert top.splitlines()[0] == "top self time (10 samples)"
    assert "fairgate.proxy:Limit.enter" in top.splitlines()[1]
    assert spots.to_json()["by_stage"]["pipeline"] == 0.0


def test_every_row_names_a_stage_of_the_table() -> None:
    known = {*hotspots.STAGE_ORDER, hotspots.CALLER}
    for stage, _, _ in hotspots.STAGES + hotspots.FALLBACK:
        assert stage in known


def test_collect_says_why_py_spy_wrote_nothing(tmp_path: Path) -> None:
    spy = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.exit('Error: Permission Denied')"],
        stderr=subprocess.PIPE,
    )
    with pytest.raises(hotspots.Unavailable, match=r"Permission Denied.*ptrace"):
        hotspots.collect(spy, tmp_path / "none.txt", timeout=30)


def test_record_without_py_spy_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hotspots.shutil, "which", lambda _name: None)
    monkeypatch.setattr(hotspots.sys, "executable", str(tmp_path / "python"))
    with pytest.raises(hotspots.Unavailable, match="py-spy is not installed"):
        hotspots.record(1, 1.0, tmp_path / "stacks.txt")
