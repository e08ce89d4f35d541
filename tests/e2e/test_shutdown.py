"""Graceful shutdown: on SIGTERM stop accepting, let streams finish up to a grace period.

``/readyz`` turns 503 at once (a load balancer stops sending), the client port
refuses new connections, running streams go on to their ``[DONE]`` within
``proxy.shutdown_grace``; past it they end with an error event, a request still
waiting for its answer gets 503, and the process exits 0 either way.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator

import orjson
import pytest
from tests.e2e.conftest import StartGateway, model
from tests.e2e.robust_wire import (
    PATIENT_HEALTH,
    chat_body,
    connect,
    get,
    post,
    read_to_end,
    read_until,
    until,
)

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess

pytestmark = pytest.mark.slow

GRACE = 4.0


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with SimProcess("--model", "m", "--speed", "10", "--ttft", "0") as started:
        yield started


def start(start_gateway: StartGateway, sim: SimProcess, grace: float = GRACE) -> GatewayProcess:
    sim.reset()
    return start_gateway(
        [model("m", sim)], proxy={"shutdown_grace": f"{grace}s"}, health=PATIENT_HEALTH
    )


def refuses_connections(gateway: GatewayProcess) -> bool:
    try:
        connect(gateway.host, gateway.port).close()
    except ConnectionRefusedError:
        return True
    return False


def test_a_stream_within_the_grace_period_finishes_while_the_gateway_drains(
    start_gateway: StartGateway, sim: SimProcess
) -> None:
    gateway = start(start_gateway, sim)
    assert get(gateway.admin_url + "/readyz")[0] == 200
    sock = connect(gateway.host, gateway.port)
    post(sock, "/v1/chat/completions", chat_body(stream=True, max_tokens=20))  # about 2 s
    before = read_until(sock, lambda got: got.count(b"data: {") >= 2, timeout=30)
    assert before.startswith(b"HTTP/1.1 200")

    os.kill(gateway.pid or 0, signal.SIGTERM)
    until(lambda: get(gateway.admin_url + "/readyz")[0] == 503, 5, "/readyz answers 503")
    assert orjson.loads(get(gateway.admin_url + "/readyz")[1])["draining"] is True
    until(lambda: refuses_connections(gateway), 5, "new connections are refused")

    rest, ended = read_to_end(sock, 30)
    sock.close()
    assert rest.count(b"data: {") >= 1  # the stream went on after the signal
    assert rest.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n") and ended == "eof"
    assert gateway.wait(GRACE + 10) == 0
    assert sim.stats()["finished"] == 1 and sim.stats()["aborted"] == 0


def test_past_the_grace_period_a_stream_is_cut_off_and_a_waiting_request_gets_503(
    start_gateway: StartGateway, sim: SimProcess
) -> None:
    gateway = start(start_gateway, sim)
    stream = connect(gateway.host, gateway.port)
    post(stream, "/v1/chat/completions", chat_body(stream=True, max_tokens=600))  # a minute
    assert read_until(stream, lambda got: b"data: {" in got, timeout=30).startswith(b"HTTP/1.1 200")
    plain = connect(gateway.host, gateway.port)
    post(plain, "/v1/chat/completions", chat_body(stream=False, max_tokens=600))
    until(lambda: sim.stats()["received"] == 2, 10, "both requests reached the engine")

    signalled = time.monotonic()
    os.kill(gateway.pid or 0, signal.SIGTERM)
    streamed, stream_ended = read_to_end(stream, GRACE + 20)
    cut_after = time.monotonic() - signalled
    answered, _ = read_to_end(plain, 10)
    stream.close()
    plain.close()

    assert GRACE - 0.5 <= cut_after <= GRACE + 10
    assert b"data: [DONE]" not in streamed
    assert b'"type":"shutting_down"' in streamed  # an error event the client can tell apart
    assert streamed.endswith(b"\r\n0\r\n\r\n") and stream_ended == "eof"
    head, _, payload = answered.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503"), answered[:300]
    assert orjson.loads(payload)["error"]["code"] == "shutting_down"
    assert gateway.wait(15) == 0
    until(lambda: sim.stats()["aborted"] == 2, 10, "both upstream requests cancelled")


def test_a_second_signal_stops_at_once_but_copies_of_the_first_do_not(
    start_gateway: StartGateway, sim: SimProcess
) -> None:
    gateway = start(start_gateway, sim, grace=30)
    sock = connect(gateway.host, gateway.port)
    post(sock, "/v1/chat/completions", chat_body(stream=True, max_tokens=600))  # a minute
    assert read_until(sock, lambda got: b"data: {" in got, timeout=30).startswith(b"HTTP/1.1 200")
    os.kill(gateway.pid or 0, signal.SIGTERM)
    time.sleep(0.2)
    os.kill(gateway.pid or 0, signal.SIGTERM)  # the same stop request, delivered twice
    time.sleep(1.5)
    with pytest.raises(subprocess.TimeoutExpired):
        gateway.wait(0.1)  # still draining
    drained = read_until(sock, lambda got: False, timeout=0.5)
    assert drained.count(b"data: {") >= 8 and b"shutting_down" not in drained  # 10 tokens/s

    os.kill(gateway.pid or 0, signal.SIGINT)  # an operator insisting
    signalled = time.monotonic()
    streamed, _ = read_to_end(sock, 20)
    sock.close()
    assert gateway.wait(15) == 0
    assert time.monotonic() - signalled < 15  # far from the 30 s grace period
    assert b"data: [DONE]" not in streamed
