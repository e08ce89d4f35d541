"""Fair share visible to people, with real processes: a simulated engine, a gateway, two orgs.

Pool ``p`` of capacity 4, organisations A and B with share 0.5 each (reservation
2). A has spent (one finished request), B has not, so a borrower of B ranks 0
and one of A ranks 1. While A has 6 requests out (2 within share, 4 borrowing)
and B 3 (2 within, 1 borrowing), each 12 s long at the simulator's speed:

- every answer carries ``X-Fairgate-Share``: ``within; priority=0`` or
  ``borrowed; rank=N; priority=P``, streaming and not; a refusal before the
  claim (429) carries none; with ``fairshare.send_priority: false`` the header
  has no priority;
- ``GET /me`` shows the organisation's reservation, within-share in flight, this
  gateway's borrowers and rank;
- ``fairgate share`` reads the running gateway: a tree, ``--json``, an
  organisation admin's token sees its organisation only, a bad token is one
  line on stderr and exit status 1;
- two gateways on one Redis: the second's ``GET /me`` counts the first's
  within-share requests, none of them its own, and A borrows there.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.e2e.conftest import (
    TEST_KEY,
    StartGateway,
    StartSim,
    add_key,
    model,
    write_config,
)

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess
from fairgate.tenancy.limits import Limits

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

MASTER = "fgm-share-visible-master-key-0123456789"
SIM_ARGS = ("--model", "m", "--speed", "10", "--ttft", "0", "--record", "0")
LONG = 120  # tokens: 12 s at 10 tokens a second, long enough to read the counts meanwhile
ORGS = [
    {"name": "A", "share": 0.5, "teams": ["t"]},  # TEST_KEY's team
    {"name": "B", "share": 0.5, "teams": ["tb"]},
]


def _config(
    directory: Path, sim: SimProcess, *, send_priority: bool = True, llama: SimProcess | None = None
) -> Path:
    (directory / "master.key").write_text(MASTER + "\n")
    models = [model("m", sim, pool="p", cost={"output_per_mtok": 1000.0})]
    if llama is not None:  # an engine without a priority scheduler, in the same pool
        models.append(model("l", llama, pool="p", engine="llama-server"))
    return write_config(
        directory,
        models,
        pools=[{"name": "p", "capacity": 4}],
        orgs=ORGS,
        fairshare={"half_life": "1h", "send_priority": send_priority},
        master_key_file="master.key",
        logging={"level": "warning"},
    )


def fairgate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fairgate", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@dataclass
class Seen:
    """What the scenario saw: each answer's status, stream flag and share header."""

    answers: dict[str, list[tuple[int, bool, str | None]]] = field(
        default_factory=lambda: {"A": [], "B": []}
    )
    me: dict[str, dict[str, Any]] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)
    cli: dict[str, subprocess.CompletedProcess[str]] = field(default_factory=dict)
    refused: httpx.Response | None = None
    admitted: httpx.Response | None = None
    unprioritised: list[str | None] = field(default_factory=list)
    engine_errors: dict[int, tuple[int, bool, str | None]] = field(default_factory=dict)
    no_scheduler: tuple[int, bool, str | None] | None = None


def _ask(
    gateway: str, key: str, *, stream: bool, tokens: int, name: str = "m"
) -> tuple[int, bool, str | None]:
    body = {
        "model": name,
        "messages": [{"role": "user", "content": "tell me about fair share"}],
        "max_tokens": tokens,
        "stream": stream,
    }
    auth = {"authorization": f"Bearer {key}"}
    url = gateway + "/v1/chat/completions"
    with httpx.stream("POST", url, json=body, headers=auth, timeout=60) as answer:
        answer.read()
        return answer.status_code, stream, answer.headers.get("x-fairgate-share")


def _admin(gateway: GatewayProcess) -> dict[str, Any]:
    answer = httpx.get(
        gateway.admin_url + "/admin/fairshare",
        headers={"authorization": f"Bearer {MASTER}"},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    report: dict[str, Any] = answer.json()
    return report


def _org(report: dict[str, Any], org: str) -> dict[str, Any]:
    (pool,) = report["pools"]
    row: dict[str, Any] = next(r for r in pool["orgs"] if r["org"] == org)
    return row


def _until(check: Callable[[], bool], what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _in_flight(gateway: GatewayProcess, org: str, within: int, borrowing: int) -> bool:
    here = _org(_admin(gateway), org)["this_gateway"]
    return bool(
        here["within_share_in_flight"] == within and here["borrowing_in_flight"] == borrowing
    )


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seen]:
    seen = Seen()
    directory = tmp_path_factory.mktemp("share")
    llama_args = ("--speed", "0", "--model", "l", "--personality", "llama-server")
    with SimProcess(*SIM_ARGS) as sim, SimProcess(*llama_args) as llama:
        config = _config(directory, sim, llama=llama)
        keys = {"A": TEST_KEY, "B": add_key(config, "tb")}
        limited = add_key(config, "t", limits=Limits(rpm=1))
        assert fairgate("users", "create", "olga", "--org", "B", "-c", str(config)).returncode == 0
        granted = fairgate("users", "grant", "olga", "org_admin", "--org", "B", "-c", str(config))
        assert granted.returncode == 0, granted.stderr
        made = fairgate("admin-tokens", "create", "--user", "olga", "--json", "-c", str(config))
        assert made.returncode == 0, made.stderr
        (directory / "olga.token").write_text(json.loads(made.stdout)[0]["secret"])
        (directory / "bad.token").write_text("fga-not-a-token-of-this-gateway")
        with GatewayProcess(config) as gateway:
            # A spends first: its usage ranks its borrowers behind B's (rank 1 vs 0).
            assert _ask(gateway.url, keys["A"], stream=False, tokens=5)[0] == 200
            _until(lambda: _org(_admin(gateway), "A")["usage"] > 0, "A's usage")
            threads: list[threading.Thread] = []

            def send(org: str, stream: bool) -> None:
                def run() -> None:
                    seen.answers[org].append(
                        _ask(gateway.url, keys[org], stream=stream, tokens=LONG)
                    )

                threads.append(threading.Thread(target=run))
                threads[-1].start()

            # A: two streams take its reservation, then two streams and two plain borrow
            send("A", True)
            send("A", True)
            _until(lambda: _in_flight(gateway, "A", 2, 0), "A's two within share")
            for stream in (True, True, False, False):
                send("A", stream)
            # B: two plain requests within share, then a stream that borrows
            send("B", False)
            send("B", False)
            _until(lambda: _in_flight(gateway, "B", 2, 0), "B's two within share")
            send("B", True)
            _until(lambda: _in_flight(gateway, "A", 2, 4), "A's borrowers")
            _until(lambda: _in_flight(gateway, "B", 2, 1), "B's borrower")
            for org in ("A", "B"):
                me = httpx.get(
                    gateway.url + "/me", headers={"authorization": f"Bearer {keys[org]}"}
                )
                assert me.status_code == 200, me.text
                seen.me[org] = me.json()
            seen.report = _admin(gateway)
            admin = ("--url", gateway.admin_url, "-c", str(config))
            seen.cli["text"] = fairgate("share", *admin)
            seen.cli["json"] = fairgate("share", "--json", "--pool", "p", *admin)
            for thread in threads:
                thread.join(60)
            olga = ("--token-file", str(directory / "olga.token"))
            seen.cli["org_admin"] = fairgate("share", "--json", *olga, *admin)
            bad = ("--token-file", str(directory / "bad.token"))
            seen.cli["bad_token"] = fairgate("share", *bad, *admin)
            limited_auth = {"authorization": f"Bearer {limited}"}
            ask = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
            chat = gateway.url + "/v1/chat/completions"
            seen.admitted = httpx.post(chat, json=ask, headers=limited_auth, timeout=30)
            seen.refused = httpx.post(chat, json=ask, headers=limited_auth, timeout=30)
            # the engine's own error answers, relayed: a 400 as it is, a 503 once no
            # other replica is left to try
            for status in (400, 503):
                sim.faults(fail_next=1, fail_status=status)
                seen.engine_errors[status] = _ask(gateway.url, keys["B"], stream=True, tokens=5)
            seen.no_scheduler = _ask(gateway.url, keys["B"], stream=False, tokens=5, name="l")
        # The same pool with no priority sent to the engine: the header has none either.
        plain = tmp_path_factory.mktemp("plain")
        with GatewayProcess(_config(plain, sim, send_priority=False)) as gateway:
            answers: list[str | None] = []

            def plain_ask() -> None:
                answers.append(_ask(gateway.url, TEST_KEY, stream=False, tokens=30)[2])

            workers = [threading.Thread(target=plain_ask) for _ in range(3)]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join(60)
            seen.unprioritised = answers
    yield seen


def test_every_answer_says_within_or_borrowed_with_rank_and_priority(seen: Seen) -> None:
    a, b = seen.answers["A"], seen.answers["B"]
    print(f"\nA's answers: {sorted(a)}\nB's answers: {sorted(b)}")
    assert all(status == 200 for status, _, _ in a + b)
    # A ranks 1 (it has usage), B 0 (none): priority = 10 + 10 * rank for an interactive model
    assert sorted(h for _, _, h in a) == 4 * ["borrowed; rank=1; priority=20"] + 2 * [
        "within; priority=0"
    ]
    assert sorted(h for _, _, h in b) == ["borrowed; rank=0; priority=10"] + 2 * [
        "within; priority=0"
    ]
    # streams carry it too, within and borrowing
    assert {h for _, stream, h in a if stream} == {
        "within; priority=0",
        "borrowed; rank=1; priority=20",
    }
    assert [h for _, stream, h in b if stream] == ["borrowed; rank=0; priority=10"]


def test_a_refusal_before_the_claim_carries_no_share(seen: Seen) -> None:
    assert seen.admitted is not None and seen.refused is not None
    assert seen.admitted.status_code == 200
    assert seen.admitted.headers["x-fairgate-share"] == "within; priority=0"
    assert seen.refused.status_code == 429
    assert "x-fairgate-share" not in seen.refused.headers


def test_an_engine_error_answer_says_how_the_request_stood(seen: Seen) -> None:
    assert seen.engine_errors == {
        400: (400, True, "within; priority=0"),
        503: (503, True, "within; priority=0"),
    }


def test_without_priorities_sent_the_header_has_none(seen: Seen) -> None:
    assert sorted(seen.unprioritised, key=str) == ["borrowed; rank=0", "within", "within"]
    # an engine without a priority scheduler is sent none, whatever the configuration
    assert seen.no_scheduler == (200, False, "within")


def test_me_shows_the_organisations_standing_in_the_pool(seen: Seen) -> None:
    (a,) = seen.me["A"]["fairshare"]
    (b,) = seen.me["B"]["fairshare"]
    print(f"\n/me A: {a}\n/me B: {b}")
    assert a["pool"] == "p" and a["share"] == 0.5 and a["reservation"] == 2
    assert a["within_share_in_flight"] == 2
    assert a["this_gateway"] == {"within_share_in_flight": 2, "borrowing_in_flight": 4}
    assert a["rank"] == 1 and a["usage"] > 0 and a["level"] is not None
    assert b["within_share_in_flight"] == 2
    assert b["this_gateway"] == {"within_share_in_flight": 2, "borrowing_in_flight": 1}
    assert b["rank"] == 0 and b["usage"] == 0 and b["level"] is None  # LF = +inf


def _ran(seen: Seen, name: str) -> str:
    run = seen.cli[name]
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_the_cli_prints_the_running_gateways_tree(seen: Seen) -> None:
    text = _ran(seen, "text")
    print("\n" + text)
    lines = text.splitlines()
    assert lines[0].startswith("fair share at ") and "half-life 3600 s" in lines[0]
    assert lines[1] == "└── pool p  capacity 4 (source: config)"
    # B (rank 0) before A (rank 1), each with its live counts
    assert lines[2].startswith(
        "    ├── B  share 0.5  reserved 2  in flight 2  here: 2 within, 1 borrowing  usage 0  "
        "level inf  rank 0"
    )
    # each organisation's team below it: no share of its own, the org's whole reservation
    assert lines[3] == (
        "    │   └── tb  share -  reserved 2  in flight 2  usage 0  level inf  rank 0"
    )
    assert lines[4].startswith(
        "    └── A  share 0.5  reserved 2  in flight 2  here: 2 within, 4 borrowing  usage "
    )
    assert lines[4].endswith("rank 1")
    assert lines[5].startswith("        └── t  share -  reserved 2  in flight 2  usage ")
    rows = {r["org"]: r for r in json.loads(_ran(seen, "json"))["pools"][0]["orgs"]}
    assert rows["A"]["this_gateway"]["borrowing_in_flight"] == 4
    assert rows["B"]["this_gateway"]["borrowing_in_flight"] == 1
    assert rows["A"]["rank"] == 1 and rows["B"]["rank"] == 0


def test_an_org_admin_sees_its_org_only_and_a_bad_token_is_one_line(seen: Seen) -> None:
    org_admin = json.loads(_ran(seen, "org_admin"))
    assert [r["org"] for p in org_admin["pools"] for r in p["orgs"]] == ["B"]
    bad = seen.cli["bad_token"]
    print(f"\nbad token: exit {bad.returncode}, stderr {bad.stderr!r}")
    assert bad.returncode == 1
    assert bad.stdout == ""
    assert len(bad.stderr.strip().splitlines()) == 1
    assert bad.stderr.startswith("fairgate: the gateway answered 401: ")


def test_two_gateways_on_redis_share_the_reservation_and_each_counts_its_own(
    start_sim: StartSim, start_gateway: StartGateway, redis_state: dict[str, Any]
) -> None:
    """A's requests through gateway 1 hold its reservation: gateway 2's /me sees them
    in flight (the state back end), none of them its own, and A's next request there
    borrows, as its header says."""
    sim = start_sim(*SIM_ARGS)
    sections: dict[str, Any] = {
        "pools": [{"name": "p", "capacity": 4}],
        "orgs": ORGS,
        "fairshare": {"half_life": "1h"},
        "state": redis_state,
        "logging": {"level": "warning"},
    }
    models = [model("m", sim, pool="p", cost={"output_per_mtok": 1000.0})]
    first, second = start_gateway(models, **sections), start_gateway(models, **sections)
    answers: list[tuple[int, bool, str | None]] = []
    workers = [
        threading.Thread(
            target=lambda: answers.append(_ask(first.url, TEST_KEY, stream=True, tokens=60))
        )
        for _ in range(3)
    ]
    for worker in workers:
        worker.start()
    auth = {"authorization": f"Bearer {TEST_KEY}"}

    def standing(gateway: GatewayProcess) -> dict[str, Any]:
        me = httpx.get(gateway.url + "/me", headers=auth, timeout=10)
        assert me.status_code == 200, me.text
        (row,) = me.json()["fairshare"]
        return dict(row)

    _until(lambda: standing(first)["this_gateway"]["borrowing_in_flight"] == 1, "a borrower")
    here, there = standing(first), standing(second)
    elsewhere = _ask(second.url, TEST_KEY, stream=False, tokens=5)
    for worker in workers:
        worker.join(60)
    print(f"\n/me on gateway 1: {here}\n/me on gateway 2: {there}\nvia gateway 2: {elsewhere}")
    assert here["within_share_in_flight"] == there["within_share_in_flight"] == 2
    assert here["this_gateway"] == {"within_share_in_flight": 2, "borrowing_in_flight": 1}
    assert there["this_gateway"] == {"within_share_in_flight": 0, "borrowing_in_flight": 0}
    # A's reservation is full on gateway 1: on gateway 2 A borrows, at rank 0 (no usage yet)
    assert elsewhere == (200, False, "borrowed; rank=0; priority=10")
    assert sorted(h for _, _, h in answers) == [
        "borrowed; rank=0; priority=10",
        "within; priority=0",
        "within; priority=0",
    ]
