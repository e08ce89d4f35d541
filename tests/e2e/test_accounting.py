"""One usage record per request, whatever its outcome, written by a real gateway process.

Success, an engine failure and a client abort each leave a record; SIGTERM drains
the recorder before the store closes, kill -9 under load loses no record (the next
start writes the dead process's journal) and leaves the store whole, and
`fairgate export` totals equal the sum of the records in the store.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from tests.e2e.conftest import AUTH, model, write_config
from tests.e2e.robust_wire import chat_body, connect, post, read_until

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess

pytestmark = pytest.mark.slow

COST = {"input_per_mtok": 1.0, "output_per_mtok": 10.0}


def chat(gateway: GatewayProcess, max_tokens: int = 4) -> httpx.Response:
    return httpx.post(
        gateway.url + "/v1/chat/completions",
        json={
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": max_tokens,
        },
        headers=AUTH,
        timeout=30,
    )


def test_every_request_leaves_one_record_and_sigterm_loses_none(tmp_path: Path) -> None:
    with SimProcess("--model", "m", "--tokens-per-second", "20", "--ttft", "0") as sim:
        config = write_config(tmp_path, [model("m", sim, cost=COST)], proxy={"retries": 0})
        gateway = GatewayProcess(config).start()
        try:
            ids = [chat(gateway).headers["x-request-id"] for _ in range(5)]
            sim.faults(fail_next=1, fail_status=503)
            failed = chat(gateway)
            assert failed.status_code == 503
            sock = connect(gateway.host, gateway.port)
            post(sock, "/v1/chat/completions", chat_body(stream=True, max_tokens=200))
            read_until(sock, lambda got: got.count(b"data: {") >= 2, timeout=30)
            sock.close()  # the client leaves mid-stream
            deadline = time.monotonic() + 20
            while sim.stats()["running"] and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            assert gateway.stop() == 0  # SIGTERM: the recorder drains before the store closes

    with sqlite3.connect(tmp_path / "fairgate.db") as db:
        rows = db.execute(
            "SELECT request_id, outcome, status, prompt_tokens, completion_tokens, cost_micro,"
            " estimated, team FROM usage_records"
        ).fetchall()
    by_id = {row[0]: row for row in rows}
    assert len(rows) == 7
    for request_id in ids:
        _, outcome, status, prompt, completion, cost, estimated, team = by_id[request_id]
        assert (outcome, status, completion, estimated, team) == ("ok", 200, 4, 0, "t")
        # 1 GPU-h per Mtok in, 10 out, rounded up once: never free.
        assert cost == -(-(prompt * 1_000_000 + completion * 10_000_000) // 1_000_000)
    assert by_id[failed.headers["x-request-id"]][1:3] == ("upstream_error", 503)
    (aborted,) = [row for row in rows if row[1] == "client_abort"]
    assert aborted[6] == 1 and aborted[4] >= 2  # estimated from the deltas relayed


def test_an_engine_s_refusal_before_generating_is_charged_nothing_and_the_rest_the_reservation(
    tmp_path: Path,
) -> None:
    with SimProcess("--model", "m", "--tokens-per-second", "200", "--ttft", "0") as sim:
        config = write_config(tmp_path, [model("m", sim, cost=COST)], proxy={"retries": 0})
        gateway = GatewayProcess(config).start()
        try:
            sim.faults(fail_next=1, fail_status=400)
            streamed = httpx.post(
                gateway.url + "/v1/chat/completions",
                json={
                    "model": "m",
                    "messages": [{"role": "user", "content": "hi"}],
                    "max_tokens": 1000,
                    "stream": True,
                },
                headers=AUTH,
                timeout=30,
            )
            sim.faults(fail_next=1, fail_status=422)
            refused = chat(gateway, max_tokens=1000)
            sim.faults(fail_next=1, fail_status=400)
            plain_400 = chat(gateway, max_tokens=1000)
            sim.faults(fail_next=1, fail_status=500)
            failed = chat(gateway, max_tokens=1000)
        finally:
            assert gateway.stop() == 0
    answers = (streamed, refused, plain_400, failed)
    assert [a.status_code for a in answers] == [400, 422, 400, 500]
    with sqlite3.connect(tmp_path / "fairgate.db") as db:
        rows = {
            row[0]: row[1:]
            for row in db.execute(
                "SELECT request_id, outcome, status, prompt_tokens, completion_tokens,"
                " cost_micro, estimated FROM usage_records"
            )
        }
    # a stream's status comes before its first token, and a 422 is a schema check: the
    # engine refused before generating anything, so no token and no cost
    assert rows[streamed.headers["x-request-id"]] == ("ok", 400, 0, 0, 0, 0)
    assert rows[refused.headers["x-request-id"]] == ("ok", 422, 0, 0, 0, 0)
    # a plain 400 may follow a generation (vLLM), and a 500 a failure after the engine
    # took the request: usage unknown, so the reservation
    for answer, status in ((plain_400, 400), (failed, 500)):
        outcome, got, _, completion, cost, estimated = rows[answer.headers["x-request-id"]]
        assert (outcome, got, completion, estimated) == ("ok", status, 1000, 1)
        assert cost > 0


def test_kill_9_under_load_loses_no_record_the_journal_holds(tmp_path: Path) -> None:
    """SIGKILL under load: the next start writes the dead process's journal to the store, so
    every request a client saw answered is recorded, and the store stays whole."""
    clients = 8
    answered: list[tuple[str, float]] = []  # request id, when the answer was complete
    stop = threading.Event()

    def load(gateway: GatewayProcess) -> None:
        with httpx.Client(headers=AUTH, timeout=30) as client:
            while not stop.is_set():
                try:
                    answer = client.post(
                        gateway.url + "/v1/chat/completions",
                        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                    )
                except httpx.HTTPError:
                    return  # the gateway is gone
                if answer.status_code == 200:
                    answered.append((answer.headers["x-request-id"], time.monotonic()))

    with SimProcess("--model", "m", "--speed", "0") as sim:
        config = write_config(tmp_path, [model("m", sim, cost=COST)])
        gateway = GatewayProcess(config).start()
        threads = [threading.Thread(target=load, args=(gateway,)) for _ in range(clients)]
        try:
            for thread in threads:
                thread.start()
            # several batches committed, and a second of records only in the queue
            deadline = time.monotonic() + 30
            while len(answered) < 200 and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(1.5)
            assert gateway.pid is not None
            killed_at = time.monotonic()
            os.kill(gateway.pid, signal.SIGKILL)
            assert gateway.wait(30) == -signal.SIGKILL
        finally:
            stop.set()
            for thread in threads:
                thread.join(60)
            gateway.stop()
        with sqlite3.connect(tmp_path / "fairgate.db") as db:
            before = {row[0] for row in db.execute("SELECT request_id FROM usage_records")}
        assert (tmp_path / "fairgate-journal").is_dir()

        # the gateway starts again on the same store and journal: the journal is replayed
        # before it serves
        with GatewayProcess(config) as again:
            assert chat(again).status_code == 200
        with sqlite3.connect(tmp_path / "fairgate.db") as db:
            assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            ids = {row[0] for row in db.execute("SELECT request_id FROM usage_records")}

    seen = {request_id for request_id, _ in answered}
    missing = seen - ids
    early = {rid for rid, at in answered if at < killed_at - 0.005} - ids
    print(  # the measurement the docs quote
        f"answered {len(seen)}, stored before the restart {len(before & seen)}, "
        f"after it {len(seen & ids)}, missing {len(missing)} "
        f"({len(early)} of them answered more than 5 ms before the kill)"
    )
    assert len(before & seen) < len(seen), "the kill left nothing unwritten: no test"
    assert early == set()
    assert missing == set()
    # A request can be recorded with its answer still on the way to the client when the
    # process dies (one per client), and the restarted gateway recorded its own request.
    assert len(ids - seen) <= clients + 1


STREAMS = 200


async def _streams(gateway: GatewayProcess, started: threading.Event) -> list[tuple[str, bytes]]:
    """``STREAMS`` streams at once; ``started`` is set once every one has its first token.
    Returns each stream's request id and everything it received."""
    limits = httpx.Limits(max_connections=STREAMS + 10)
    first = asyncio.Semaphore(0)

    async def one(client: httpx.AsyncClient) -> tuple[str, bytes]:
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 30,  # about 3 s at 10 tokens/s
            "stream": True,
        }
        async with client.stream("POST", gateway.url + "/v1/chat/completions", json=body) as r:
            got = b""
            async for chunk in r.aiter_bytes():
                if not got:
                    first.release()
                got += chunk
            return r.headers["x-request-id"], got

    async with httpx.AsyncClient(headers=AUTH, timeout=60, limits=limits) as client:
        tasks = [asyncio.create_task(one(client)) for _ in range(STREAMS)]
        for _ in range(STREAMS):
            await asyncio.wait_for(first.acquire(), 60)
        started.set()
        return await asyncio.gather(*tasks)


def test_sigterm_while_200_streams_run_loses_no_record(tmp_path: Path) -> None:
    with SimProcess(
        "--model", "m", "--tokens-per-second", "10", "--ttft", "0", "--max-num-seqs", "512"
    ) as sim:
        config = write_config(tmp_path, [model("m", sim, cost=COST)])
        gateway = GatewayProcess(config).start()
        started = threading.Event()
        results: list[list[tuple[str, bytes]]] = []
        runner = threading.Thread(
            target=lambda: results.append(asyncio.run(_streams(gateway, started)))
        )
        try:
            runner.start()
            assert started.wait(90), "the 200 streams did not all start"
            assert gateway.pid is not None
            os.kill(gateway.pid, signal.SIGTERM)
            runner.join(90)
            assert gateway.wait(60) == 0
        finally:
            gateway.stop()
    (streams,) = results
    assert all(got.rstrip().endswith(b"data: [DONE]") for _, got in streams)
    with sqlite3.connect(tmp_path / "fairgate.db") as db:
        rows = dict(db.execute("SELECT request_id, outcome FROM usage_records").fetchall())
    assert {rid for rid, _ in streams} <= set(rows)
    assert len(rows) == STREAMS
    assert set(rows.values()) == {"ok"}
    assert list((tmp_path / "fairgate-journal").glob("*.jsonl")) == []  # a clean stop keeps none


def test_export_totals_equal_the_records(tmp_path: Path) -> None:
    with SimProcess("--model", "m", "--speed", "0") as sim:
        config = write_config(tmp_path, [model("m", sim, cost=COST)])
        with GatewayProcess(config) as gateway:
            for tokens in (1, 2, 3):
                assert chat(gateway, tokens).status_code == 200
    with sqlite3.connect(tmp_path / "fairgate.db") as db:
        (total,) = db.execute("SELECT sum(cost_micro) FROM usage_records").fetchone()
    today = datetime.now(UTC).date()
    exported = subprocess.run(
        [
            sys.executable,
            "-m",
            "fairgate",
            "export",
            "-c",
            str(config),
            "--from",
            str(today),
            "--to",
            str(today + timedelta(days=1)),
            "--group-by",
            "team",
            "--format",
            "parsable2",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.splitlines()
    header = exported[0].split("|")
    (row,) = [line.split("|") for line in exported[1:]]
    assert row[header.index("team")] == "t"
    assert row[header.index("requests")] == "3"
    assert round(float(row[header.index("gpu_hours")]) * 1_000_000) == total
