"""A plain answer is whole in the gateway before it is written: a client that does not
read it must not keep the replica counted busy. Routing (least load, the fair-share
counts per replica) reads that count, so a caller that never read its answers would
otherwise make a replica look loaded for as long as the listener's stall deadline.
Nor may it keep what the engines' capacity is shared by: its key's in-flight place and
its organisation's fair-share seat.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from tests.e2e.conftest import add_key, model, write_config
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

from fairgate.core.limits import Limits
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
    single: str  # a key of max_in_flight 1

    def metric(self, name: str, **labels: str) -> float:
        status, body = get(self.gateway.admin_url + "/metrics")
        assert status == 200
        return samples(body.decode(), name, **labels)

    def in_flight(self) -> float:
        return self.metric("fairgate_upstream_in_flight", model="m")

    def share_in_flight(self) -> float:
        """The organisation's requests in flight in the pool, within its share or not."""
        within = self.metric("fairgate_fairshare_within_share_in_flight", pool="p")
        return within + self.metric("fairgate_fairshare_borrowing_in_flight", pool="p")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with SimProcess(*FAST_ENGINE) as sim:
        directory = tmp_path_factory.mktemp("gw")
        config = write_config(
            directory,
            [model("m", sim, pool="p")],
            pools=[{"name": "p", "capacity": 8}],
            limits={"stream_buffer_bytes": BUFFER, "slow_reader_timeout": f"{STALL:g}s"},
        )
        single = add_key(config, "t", limits=Limits(max_in_flight=1))
        with GatewayProcess(config) as gateway:
            yield Env(sim, gateway, single)


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


def test_a_client_that_does_not_read_its_plain_answer_gives_back_its_places(env: Env) -> None:
    finished = env.sim.stats()["finished"]
    sock = connect(env.gateway.host, env.gateway.port, rcvbuf=4096, mss=1400)
    try:
        # as above, with a key of one request in flight: the second answer waits to be
        # written behind the first, which the client does not read
        post(sock, "/v1/chat/completions", chat_body(stream=False, max_tokens=LONG), env.single)
        post(sock, "/v1/chat/completions", chat_body(stream=False, max_tokens=LONG), env.single)
        until(
            lambda: env.sim.stats()["finished"] >= finished + 2,
            20,
            "the engine finished both answers",
        )
        # nothing the engine does for it any more counts against the organisation's share
        until(lambda: env.share_in_flight() == 0, STALL / 2, "the fair-share seat back")
        # and the key's one place is free: the same key is served on another connection
        # while the stalled one still waits (before, 429 until the listener dropped it)
        answer = httpx.post(
            env.gateway.url + "/v1/chat/completions",
            content=chat_body(stream=False, max_tokens=4),
            headers={"authorization": f"Bearer {env.single}", "content-type": "application/json"},
            timeout=10,
        )
        assert answer.status_code == 200, answer.text
        # the stalled client still gets both answers whole once it reads
        both = read_until(sock, second_ended, timeout=30)
    finally:
        sock.close()
    assert second_ended(both), "both answers must arrive whole"


def second_ended(received: bytes) -> bool:
    """Whether ``received`` holds two whole answers (the first one's body holds no head)."""
    at = received.find(b"HTTP/1.1 ", 1)
    return at > 0 and answer_ended(received[at:])
