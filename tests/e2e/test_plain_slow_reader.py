"""A plain answer is whole in the gateway before it is written: a client that does not
read it must not keep the replica counted busy. Routing (least load, the fair-share
counts per replica) reads that count, so a caller that never read its answers would
otherwise make a replica look loaded for as long as the listener's stall deadline.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from tests.e2e.conftest import model, write_config
from tests.e2e.robust_wire import (
    answer_ended,
    chat_body,
    connect,
    get,
    post,
    read_until,
    samples,
    until,
)

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess

pytestmark = pytest.mark.slow

# An engine that writes a long answer in well under a second.
FAST_ENGINE = ("--model", "m", "--speed", "200000", "--ttft", "0", "--kv-blocks", "200000")
LONG = 60_000  # tokens: some hundreds of KiB of JSON, more than the socket buffers hold
BUFFER = 64 * 1024  # limits.stream_buffer_bytes: what the gateway buffers toward a client
STALL = 10.0  # limits.slow_reader_timeout: the listener drops a stalled client after 2x


@dataclass(frozen=True, slots=True)
class Env:
    sim: SimProcess
    gateway: GatewayProcess

    def in_flight(self) -> float:
        status, body = get(self.gateway.admin_url + "/metrics")
        assert status == 200
        return samples(body.decode(), "fairgate_upstream_in_flight", model="m")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with SimProcess(*FAST_ENGINE) as sim:
        directory = tmp_path_factory.mktemp("gw")
        config = write_config(
            directory,
            [model("m", sim)],
            limits={"stream_buffer_bytes": BUFFER, "slow_reader_timeout": f"{STALL:g}s"},
        )
        with GatewayProcess(config) as gateway:
            yield Env(sim, gateway)


def test_a_client_that_does_not_read_its_plain_answer_does_not_hold_the_replica(
    env: Env,
) -> None:
    # a client on a small, slow network that sends its request and reads nothing
    sock = connect(env.gateway.host, env.gateway.port, rcvbuf=4096, mss=1400)
    try:
        # Two answers on one keep-alive connection: the first fills the buffers toward
        # the client, so the second waits to be written once the engine has made it.
        post(sock, "/v1/chat/completions", chat_body(stream=False, max_tokens=LONG))
        post(sock, "/v1/chat/completions", chat_body(stream=False, max_tokens=LONG))
        until(lambda: env.sim.stats()["finished"] >= 2, 20, "the engine finished both answers")
        # the engine is done and the answer is in the gateway: the replica is free,
        # well before the stalled client is dropped (2 x STALL)
        until(lambda: env.in_flight() == 0, STALL / 2, "the replica's in-flight back to 0")
        # and the client still gets the whole answer once it reads
        answer = read_until(sock, answer_ended, timeout=20)
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    assert answer_ended(answer), "the answer must arrive whole"
    assert len(answer) > 256 * 1024, "the answer must be larger than the buffers"
