"""The pipeline's stages in their order, through the real Gateway called in-process.

identify → read → limit → admit → route → relay → settle: each test shows what a
caller or an operator sees when one stage comes before another (a refusal that
costs no body, a refusal that takes no fair-share slot), and what the route and
settle stages promise (no retry once bytes reached the client; a client gone
before its answer is charged the reservation).
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Any

import orjson
import pytest
from tests.e2e.conftest import HEAVIEST_FIRST, model
from tests.proxy.conftest import InProcess, StartGateway

from fairgate.accounting.journal import entry_record
from fairgate.config.settings import DEFAULT_JOURNAL
from fairgate.sim.process import SimProcess
from fairgate.tenancy.limits import Limits

CHAT = "/v1/chat/completions"


def chat(tokens: int = 5, **extra: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": tokens,
        **extra,
    }


def heaviest_first(first: SimProcess, then: SimProcess) -> dict[str, Any]:
    """Model m on two replicas, ``first`` always tried first."""
    return model(
        "m",
        upstreams=[{"name": "r0", "url": first.url, "weight": 2}, {"name": "r1", "url": then.url}],
        routing=HEAVIEST_FIRST,
    )


async def engine_saw(sim: SimProcess) -> int:
    """How many chat requests reached the engine."""
    return len(await asyncio.to_thread(sim.requests, CHAT))


async def test_a_key_refused_its_rate_is_refused_again_before_its_body_is_read(
    sim: SimProcess, start_gateway: StartGateway
) -> None:
    gw = await start_gateway([model("m", sim)])
    key = await gw.add_key(limits=Limits(rpm=1))
    first = await gw.call(CHAT, chat(), key=key)
    assert first.status == 200, first.body
    refused = await gw.call(CHAT, chat(), key=key)  # the limiter refuses: body read
    assert refused.status == 429 and refused.reads >= 1
    again = await gw.call(CHAT, chat(), key=key)
    # the head check knows the refusal: 429 without asking for a byte of the body
    assert again.status == 429, again.body
    assert again.json()["error"]["code"] == "rpm_limit_exceeded"
    assert b"retry-after" in again.headers
    assert again.reads == 0
    assert await engine_saw(sim) == 1


async def test_a_request_refused_by_its_limits_takes_no_fair_share_slot(
    sim: SimProcess, start_gateway: StartGateway
) -> None:
    gw = await start_gateway(
        [model("m", sim, pool="p")],
        pools=[{"name": "p", "capacity": 4}],
        fairshare={"half_life": "1h"},
    )
    key = await gw.add_key(limits=Limits(rpm=1))
    claims = {"pool": "p", "org": "test-org", "kind": "within_share"}
    served = await gw.call(CHAT, chat(), key=key)
    assert served.status == 200
    assert served.headers[b"x-fairgate-share"].startswith(b"within")
    assert gw.metric("fairgate_fairshare_requests_total", **claims) == 1
    refused = await gw.call(CHAT, chat(), key=key)
    assert refused.status == 429
    # refused in the limit stage, before admit: no claim counted, no standing shown
    assert b"x-fairgate-share" not in refused.headers
    assert gw.metric("fairgate_fairshare_requests_total", **claims) == 1
    assert await engine_saw(sim) == 1


async def test_a_client_gone_before_its_answer_is_charged_its_reservation(
    sim: SimProcess, start_gateway: StartGateway
) -> None:
    gw = await start_gateway([model("m", sim)])
    key = await gw.add_key(limits=Limits(tpm=1_000_000))
    await asyncio.to_thread(sim.faults, stall_before_headers=30)  # the engine works on it
    gone = asyncio.Event()

    async def leave_once_the_engine_has_it() -> None:
        while await engine_saw(sim) == 0:
            await asyncio.sleep(0.02)
        gone.set()

    leaving = asyncio.create_task(leave_once_the_engine_has_it())
    answer = await asyncio.wait_for(gw.call(CHAT, chat(tokens=500), key=key, disconnect=gone), 20)
    await leaving
    assert answer.status == 0 and answer.body == b""  # nothing reached the client
    me = (await gw.client.get("/me", headers={"authorization": f"Bearer {key}"})).json()
    # charged the prompt's estimate and every output token it may have generated
    assert me["limits"]["tpm"]["used"] >= 500
    assert gw.metric("fairgate_requests_total", model="m", route=CHAT, status="499") == 1


async def test_an_attempt_failing_before_any_byte_is_retried_on_another_replica(
    sim: SimProcess, other_sim: SimProcess, start_gateway: StartGateway
) -> None:
    gw: InProcess = await start_gateway([heaviest_first(sim, other_sim)])
    await asyncio.to_thread(sim.faults, fail_next=1, fail_status=503)  # tried first
    answer = await gw.call(CHAT, chat())
    assert answer.status == 200, answer.body
    assert await engine_saw(sim) + await engine_saw(other_sim) == 2
    assert gw.metric("fairgate_upstream_retries_total", model="m") == 1


async def test_no_retry_once_bytes_reached_the_client(
    sim: SimProcess, other_sim: SimProcess, start_gateway: StartGateway
) -> None:
    gw = await start_gateway([heaviest_first(sim, other_sim)])
    await asyncio.to_thread(sim.faults, close_mid_stream=2)  # tried first, drops after two tokens
    answer = await gw.call(CHAT, chat(tokens=20, stream=True))
    assert answer.status == 200
    events = [line for line in answer.body.split(b"\n\n") if line.startswith(b"data:")]
    assert len(events) >= 2 and b"error" in events[-1]  # the stream ends with an error event
    assert b"[DONE]" not in answer.body
    assert await engine_saw(sim) + await engine_saw(other_sim) == 1  # no other try
    assert gw.metric("fairgate_upstream_retries_total", model="m") == 0


def journal_lines(
    gw: InProcess, request_id: bytes, *, intents: bool = False
) -> list[dict[str, Any]]:
    """The journal's records of one request (``intents``: its write-ahead entries instead),
    read off the files as a process that replays a dead gateway's journal would read them."""
    directory = gw.config.parent / DEFAULT_JOURNAL
    lines = [line for path in directory.glob("*.jsonl") for line in path.read_bytes().splitlines()]
    found = [orjson.loads(line) for line in lines if request_id in line]
    if intents:
        return [asdict(entry_record(line["intent"])) for line in found if "intent" in line]
    return [line for line in found if "intent" not in line]


@pytest.mark.parametrize("kind", ["plain", "stream", "refused"])
async def test_an_answers_record_is_journaled_before_a_client_can_hold_it_whole(
    kind: str, sim: SimProcess, start_gateway: StartGateway
) -> None:
    """A gateway killed (SIGKILL) once a client has a whole answer has journaled its record:
    the record is on disk before the answer's last message, or the message with a stream's
    ``data: [DONE]``, reaches the server."""
    gw = await start_gateway([model("m", sim)])
    key = await gw.add_key(limits=Limits(rpm=1))
    if kind == "refused":
        assert (await gw.call(CHAT, chat(), key=key)).status == 200
    at_end: list[list[dict[str, Any]]] = []

    def look(headers: dict[bytes, bytes], message: dict[str, Any]) -> None:
        if kind == "stream":  # a client may stop reading at the terminal event
            ends = b"data: [DONE]" in message["body"]
        else:
            ends = not message.get("more_body", False)
        if ends:
            at_end.append(journal_lines(gw, headers[b"x-request-id"]))

    answer = await gw.call(CHAT, chat(stream=kind == "stream"), key=key, at_message=look)

    assert answer.status == (429 if kind == "refused" else 200), answer.body
    [records_then] = at_end
    assert len(records_then) == 1, "the record was not journaled before the answer ended"
    [record] = records_then
    assert record["status"] == answer.status
    assert record["outcome"] == ("refused" if kind == "refused" else "ok")
    if kind != "refused":
        assert record["completion_tokens"] == 5 and not record["estimated"]
    # settled once: the record is not made a second time when the request settles
    assert journal_lines(gw, answer.headers[b"x-request-id"]) == records_then


async def test_each_attempt_journals_what_a_kill_would_owe_before_the_engine_answers(
    sim: SimProcess, other_sim: SimProcess, start_gateway: StartGateway
) -> None:
    """While a request is in flight its write-ahead entry is on disk: the record the next
    process writes if this one is killed now, charged the reservation of every attempt that
    reached an engine. A retry's entry replaces the first attempt's."""
    gw = await start_gateway([heaviest_first(sim, other_sim)], limits={"headers_timeout": "1s"})
    # tried first: takes the request and never answers, so the retry goes to the other
    await asyncio.to_thread(sim.faults, stall_before_headers=30)
    seen: list[list[dict[str, Any]]] = []

    def look(headers: dict[bytes, bytes], message: dict[str, Any]) -> None:
        if not seen:  # the answer's first message: the request is still in flight
            seen.append(journal_lines(gw, headers[b"x-request-id"], intents=True))

    answer = await gw.call(CHAT, chat(tokens=7, stream=True), at_message=look)
    assert answer.status == 200 and b"data: [DONE]" in answer.body
    [entries] = seen
    assert [e["attempts"] for e in entries] == [1, 2]
    first, retry = entries
    assert (first["replica"], retry["replica"]) == ("r0", "r1")
    for entry, reserved in ((first, 1), (retry, 2)):  # the stalled attempt is owed too
        assert entry["outcome"] == "interrupted" and entry["estimated"]
        assert entry["status"] == 0 and entry["model"] == "m"
        assert entry["completion_tokens"] == 7 * reserved
    # the record made as the answer ended is what the store gets: one, not an entry (the
    # answer's 7 tokens and the stalled attempt's reservation)
    [record] = journal_lines(gw, answer.headers[b"x-request-id"])
    assert record["outcome"] == "ok" and record["completion_tokens"] == 7 + 7


async def test_a_retrys_entry_prices_each_attempt_at_the_model_it_tried(
    sim: SimProcess, other_sim: SimProcess, start_gateway: StartGateway
) -> None:
    """A dear model whose engine took the request and never answered, then its cheap
    fallback: the retry's entry owes the dear attempt at the dear prices and its own at
    the cheap ones, as the request's record does once it is answered."""
    dear = {"input_per_mtok": 0.0, "output_per_mtok": 1000.0}  # 1,000 micro a token
    cheap = {"input_per_mtok": 0.0, "output_per_mtok": 1.0}
    gw = await start_gateway(
        [
            model("big", sim, upstream_model="m", cost=dear, fallbacks=["small"]),
            model("small", other_sim, upstream_model="m", cost=cheap),
        ],
        limits={"headers_timeout": "1s"},
    )
    await asyncio.to_thread(sim.faults, stall_before_headers=30)
    seen: list[list[dict[str, Any]]] = []

    def look(headers: dict[bytes, bytes], message: dict[str, Any]) -> None:
        if not seen:
            seen.append(journal_lines(gw, headers[b"x-request-id"], intents=True))

    answer = await gw.call(CHAT, chat(tokens=7, stream=True, model="big"), at_message=look)
    assert answer.status == 200 and b"data: [DONE]" in answer.body
    [[first, retry]] = seen
    assert (first["model"], first["cost_micro"]) == ("big", 7 * 1000)
    assert (retry["model"], retry["cost_micro"]) == ("small", 7 * 1000 + 7)
    [record] = journal_lines(gw, answer.headers[b"x-request-id"])
    assert (record["model"], record["cost_micro"]) == ("small", 7 * 1000 + 7)


async def test_a_borrower_preempted_before_any_byte_is_answered_503_and_not_retried(
    start_gateway: StartGateway,
) -> None:
    # two engines of one seat each (--max-num-seqs 1), C = 2: test-org's within-share
    # request takes one seat, its borrower the other; A's within-share stream then waits
    # in the engine's queue until the gateway preempts the borrower for it
    args = ("--model", "m", "--speed", "20", "--ttft", "0", "--max-num-seqs", "1")
    with SimProcess(*args) as one, SimProcess(*args) as two:
        gw = await start_gateway(
            [model("m", one, two, pool="p")],
            pools=[{"name": "p", "capacity": 2}],
            orgs=[
                {"name": "test-org", "share": 0.5, "teams": ["t"]},
                {"name": "A", "share": 0.5, "teams": ["ta"]},
            ],
            fairshare={"reclaim_after": "500ms"},
        )
        owner = await gw.add_key(team="ta")
        held = asyncio.create_task(gw.call(CHAT, chat(tokens=2000)))  # 100 s of output
        await asyncio.sleep(0.3)
        borrower = asyncio.create_task(gw.call(CHAT, chat(tokens=2000)))
        while await engine_saw(one) + await engine_saw(two) < 2:
            await asyncio.sleep(0.05)
        began = asyncio.get_running_loop().time()
        owner_stream = chat(tokens=5, stream=True)  # only a stream's start can be seen
        answer = await asyncio.wait_for(gw.call(CHAT, owner_stream, key=owner), 10)
        assert answer.status == 200, answer.body
        assert answer.headers[b"x-fairgate-share"].startswith(b"within")
        assert asyncio.get_running_loop().time() - began < 3
        preempted = await asyncio.wait_for(borrower, 5)
        assert preempted.status == 503
        assert orjson.loads(preempted.body)["error"]["code"] == "preempted"
        assert preempted.headers[b"retry-after"] == b"1"
        assert preempted.headers[b"x-fairgate-share"].startswith(b"borrowed")
        assert not held.done()  # the within-share request runs on
        assert await engine_saw(one) + await engine_saw(two) == 3  # the borrower: no retry
        assert gw.metric("fairgate_fairshare_preemptions_total", pool="p", org="test-org") == 1
        held.cancel()
        await asyncio.gather(held, return_exceptions=True)
