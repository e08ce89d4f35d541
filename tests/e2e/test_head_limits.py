"""A key the limiter would refuse costs the gateway no body: the head is checked first.

Attacked through a real gateway and simulated engine: a key at its in-flight limit,
or whose requests per minute were just refused, sends heads announcing 32 MiB bodies
and then sends nothing (the gateway must answer from the head alone), or sends the
whole bodies from twenty connections at once (the gateway's peak memory must not
grow by them).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson
import pytest
from tests.e2e.conftest import TEST_KEY, add_key, model, write_config
from tests.e2e.robust_wire import chat_body, connect, post, read_to_end, read_until, until
from tests.e2e.test_limits import passed, refusal

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess
from fairgate.tenancy.limits import Limits

pytestmark = pytest.mark.slow

BODY_LIMIT = 32 * 1024 * 1024
# Long enough that a gateway waiting for the body could not answer in the read below.
BODY_TIMEOUT = "60s"


def big_body() -> bytes:
    """A valid chat request just under the 32 MiB body limit."""
    frame = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": ""}]})
    filler = b"a" * (BODY_LIMIT - len(frame) - 64)
    return frame.replace(b'"content":""', b'"content":"' + filler + b'"')


def head_only(
    gateway: GatewayProcess, length: int = BODY_LIMIT - 64, key: str = TEST_KEY
) -> tuple[bytes, str]:
    """Send a request head announcing ``length`` bytes of body and no body; what came back."""
    sock = connect(gateway.host, gateway.port)
    try:
        sock.sendall(
            (
                f"POST /v1/chat/completions HTTP/1.1\r\nhost: gateway\r\n"
                f"content-type: application/json\r\nauthorization: Bearer {key}\r\n"
                f"content-length: {length}\r\n\r\n"
            ).encode()
        )
        return read_to_end(sock, timeout=20)
    finally:
        sock.close()


def status_and_code(answer: bytes) -> tuple[int, str]:
    assert answer, "no answer: the gateway waited for the body"
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, orjson.loads(body)["error"]["code"]


def peak_rss_kib(pid: int) -> int:
    """The process's resident-set high-water mark (VmHWM), KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def send_whole(
    gateway: GatewayProcess, body: bytes, answers: list[bytes], key: str = TEST_KEY
) -> None:
    sock = connect(gateway.host, gateway.port)
    try:
        with contextlib.suppress(OSError):  # closed while the body is on its way: expected
            post(sock, "/v1/chat/completions", body, key=key)
        try:
            answers.append(read_to_end(sock, timeout=30)[0])
        except OSError:
            answers.append(b"")
    finally:
        sock.close()


@dataclass(frozen=True, slots=True)
class Env:
    """One gateway for the module: model ``m`` answers at once, ``slow`` streams ten tokens
    a second (a request held open); each test has a key of its own with its limits."""

    gateway: GatewayProcess
    held: str  # max_in_flight=1
    rpm: str  # rpm=2
    under: str  # max_in_flight=1, rpm=100


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with (
        SimProcess("--model", "m", "--speed", "0") as sim,
        SimProcess("--model", "slow", "--speed", "10", "--ttft", "0") as slow,
    ):
        directory = tmp_path_factory.mktemp("gw")
        path = write_config(
            directory,
            [model("m", sim), model("slow", slow)],
            limits={"client_body_timeout": BODY_TIMEOUT},
        )
        held = add_key(path, "t", limits=Limits(max_in_flight=1))
        rpm = add_key(path, "t", limits=Limits(rpm=2))
        under = add_key(path, "t", limits=Limits(max_in_flight=1, rpm=100))
        with GatewayProcess(path) as gateway:
            yield Env(gateway, held, rpm, under)


def chat_as(gateway: GatewayProcess, key: str) -> httpx.Response:
    """One non-streamed chat completion of four tokens on ``m`` as ``key``."""
    return httpx.post(
        gateway.url + "/v1/chat/completions",
        content=chat_body(stream=False, max_tokens=4),
        headers={"authorization": f"Bearer {key}", "content-type": "application/json"},
        timeout=30,
    )


def test_a_key_at_its_in_flight_limit_is_refused_before_its_body_is_read(env: Env) -> None:
    gateway, key = env.gateway, env.held
    holder = connect(gateway.host, gateway.port)
    try:
        body = chat_body(stream=True, max_tokens=2000, model="slow")
        post(holder, "/v1/chat/completions", body, key=key)
        read_until(holder, lambda got: got.count(b"data: {") >= 2, timeout=30)

        # The head alone is answered: 429 naming the limit, and the connection closed
        # (a gateway reading the body would still be waiting for it).
        answer, end = head_only(gateway, key=key)
        assert status_and_code(answer) == (429, "in_flight_limit_exceeded"), answer[:300]
        assert b"connection: close" in answer.lower() and end in ("eof", "reset")

        # Twenty clients send their whole 32 MiB bodies at once: the gateway's peak
        # memory does not grow by them (reading them would take 640 MiB).
        whole = big_body()
        pid = gateway.pid
        assert pid is not None
        before = peak_rss_kib(pid)
        answers: list[bytes] = []
        threads = [
            threading.Thread(target=send_whole, args=(gateway, whole, answers, key))
            for _ in range(20)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        grown_mib = (peak_rss_kib(pid) - before) / 1024
        assert grown_mib < 96, f"peak memory grew by {grown_mib:.0f} MiB"
        refused = [status_and_code(a) for a in answers if a]
        assert refused and set(refused) == {(429, "in_flight_limit_exceeded")}
    finally:
        holder.close()  # the held request ends: the key's slot comes back
    served = until(lambda: passed(chat_as(gateway, key)), 20, "served once the slot is free", 0.2)
    assert served is not None


def test_a_key_refused_for_requests_per_minute_is_refused_from_the_head(env: Env) -> None:
    gateway, key = env.gateway, env.rpm
    assert [chat_as(gateway, key).status_code for _ in range(2)] == [200, 200]
    status, code, _ = refusal(chat_as(gateway, key))  # the limiter refuses, with a Retry-After
    assert (status, code) == (429, "rpm_limit_exceeded")
    answer, _ = head_only(gateway, key=key)
    assert status_and_code(answer) == (429, "rpm_limit_exceeded"), answer[:300]
    assert b"retry-after:" in answer.lower()


def test_an_unknown_key_is_refused_from_its_head_and_its_body_never_read(env: Env) -> None:
    answer, end = head_only(env.gateway, key="fg-" + "x" * 43)
    assert status_and_code(answer) == (401, "invalid_api_key"), answer[:300]
    # closed after the answer: the announced body is not waited for, nor drained
    assert b"connection: close" in answer.lower() and end in ("eof", "reset")


def test_a_key_under_its_limits_still_sends_its_body(env: Env) -> None:
    gateway, key = env.gateway, env.under
    for _ in range(3):  # one at a time: each finds the slot free again
        answer = chat_as(gateway, key)
        assert answer.status_code == 200, answer.text
    sock = connect(gateway.host, gateway.port)
    try:  # a body sent after its head is read and served on a kept-alive connection
        body = chat_body(stream=False, max_tokens=3)
        for _ in range(2):
            post(sock, "/v1/chat/completions", body, key=key)
            got = read_until(sock, lambda b: b'"completion_tokens":3' in b, timeout=20)
            assert got.startswith(b"HTTP/1.1 200"), got[:300]
    finally:
        sock.close()
