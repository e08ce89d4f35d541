"""HTTPS on both listeners of a real gateway process, the simulator behind it.

The official SDK trusting a test CA is served over TLS; old protocol versions and
plain HTTP get no answer; the admin listener with a client CA refuses clients
without a certificate of that CA and still wants the master key from those with
one; the head timeout and the slow-reader cut hold over TLS; SIGHUP swaps the
certificate for new connections while a stream opened before carries on.
"""

from __future__ import annotations

import os
import signal
import socket
import ssl
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from cryptography import x509
from tests.e2e.conftest import TEST_KEY, model, write_config
from tests.e2e.robust_wire import (
    PATIENT_HEALTH,
    chat_body,
    connect,
    post,
    read_to_end,
    read_until,
    samples,
    stderr_into,
    until,
)
from tests.tls_certs import Authority, Issued, Pki, legacy_client_hello

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess

pytestmark = pytest.mark.slow

MASTER = "a-master-key-for-the-tls-tests"
HEAD_TIMEOUT = 2.0
CUT_AFTER = 2.0  # limits.slow_reader_timeout


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki.make(tmp_path_factory.mktemp("clients"))


def tls_config(directory: Path, pki: Pki, **sections: Any) -> dict[str, Any]:
    """``listen`` and ``admin_listen`` with TLS, the files written into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    pki.server.write(directory, "server")
    pki.ca.write(directory / "operators.pem")
    (directory / "master.key").write_text(MASTER + "\n")
    files = {"cert_file": "server.crt", "key_file": "server.key"}
    return {
        "listen": {"tls": files},
        "admin_listen": {"tls": {**files, "client_ca_file": "operators.pem"}},
        "master_key_file": "master.key",
        **sections,
    }


@dataclass(frozen=True)
class Env:
    sim: SimProcess
    gateway: GatewayProcess
    pki: Pki

    def client(self) -> openai.OpenAI:
        http = httpx.Client(verify=self.pki.ca.trusting(), timeout=30)
        return openai.OpenAI(
            base_url=self.gateway.url + "/v1", api_key=TEST_KEY, max_retries=0, http_client=http
        )

    def operator(self, issued: Issued | None = None) -> httpx.Client:
        """An admin client presenting a certificate of our CA (or ``issued``)."""
        issued = issued or self.pki.ca.issue("operator")
        context = issued.client_context(self.pki.ca, self.pki.directory)
        return httpx.Client(verify=context, timeout=10)


@pytest.fixture(scope="module")
def env(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with ExitStack() as stack:
        sim = stack.enter_context(
            SimProcess("--model", "m", "--speed", "1000", "--ttft", "0", "--kv-blocks", "200000")
        )
        directory = tmp_path_factory.mktemp("gw")
        sections = tls_config(
            directory,
            pki,
            health=PATIENT_HEALTH,
            limits={
                "client_head_timeout": f"{HEAD_TIMEOUT}s",
                "slow_reader_timeout": f"{CUT_AFTER}s",
                "stream_buffer_bytes": 64 * 1024,
            },
        )
        config = write_config(directory, [model("m", sim)], **sections)
        yield Env(sim, stack.enter_context(GatewayProcess(config)), pki)


def tls_connect(env: Env, context: ssl.SSLContext | None = None, **tcp: Any) -> ssl.SSLSocket:
    sock = connect(env.gateway.host, env.gateway.port, **tcp)
    return (context or env.pki.ca.trusting()).wrap_socket(sock, server_hostname="127.0.0.1")


def test_the_openai_sdk_is_served_over_tls(env: Env) -> None:
    assert env.gateway.url.startswith("https://") and env.gateway.admin_url.startswith("https://")
    with env.client() as client:
        answer = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=4
        )
        chunks = list(
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=3, stream=True
            )
        )
    assert answer.usage is not None and answer.usage.completion_tokens == 4
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) == 3


def test_a_client_that_does_not_trust_the_ca_refuses_the_gateway(env: Env) -> None:
    stranger = httpx.Client(verify=env.pki.other.trusting(), timeout=10)
    with stranger, pytest.raises(httpx.ConnectError):
        stranger.get(env.gateway.url + "/v1/models")


@pytest.mark.parametrize("version", [0x0302, 0x0301], ids=["TLS 1.1", "TLS 1.0"])
def test_tls_before_1_2_is_refused(env: Env, version: int) -> None:
    sock = connect(env.gateway.host, env.gateway.port)
    sock.sendall(legacy_client_hello(version))
    received, ended = read_to_end(sock, 10)
    sock.close()
    # No ServerHello: a fatal protocol_version alert, then the end.
    if received:
        assert received[:1] == b"\x15" and received[5:7] == b"\x02\x46", received
    assert ended != "timeout"
    # The same hello offering TLS 1.2 gets a ServerHello: the refusal is the version's.
    sock = connect(env.gateway.host, env.gateway.port)
    sock.sendall(legacy_client_hello(0x0303))
    assert read_until(sock, lambda got: len(got) >= 1, 10)[:1] == b"\x16"
    sock.close()


def test_plain_http_to_the_tls_port_is_not_served(env: Env) -> None:
    received_before = env.sim.stats()["received"]
    sock = connect(env.gateway.host, env.gateway.port)
    post(sock, "/v1/chat/completions", chat_body(stream=False, max_tokens=2))
    received, ended = read_to_end(sock, 10)
    sock.close()
    assert b"HTTP/1." not in received and ended != "timeout"
    assert env.sim.stats()["received"] == received_before  # nothing went upstream
    with env.client() as client:  # and the gateway serves on
        answer = client.models.list()
    assert [m.id for m in answer.data] == ["m"]


def test_the_admin_listener_wants_a_certificate_of_its_client_ca_and_the_master_key(
    env: Env,
) -> None:
    url = env.gateway.admin_url + "/admin/whoami"
    master = {"authorization": f"Bearer {MASTER}"}
    # No client certificate: the handshake is refused (TLS 1.3: on the first read).
    refused = (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)
    anonymous = httpx.Client(verify=env.pki.ca.trusting(), timeout=10)
    with anonymous, pytest.raises(refused):
        anonymous.get(url, headers=master)
    # A certificate another CA issued: refused the same way, master key or not.
    with env.operator(env.pki.other.issue("intruder")) as intruder, pytest.raises(refused):
        intruder.get(url, headers=master)
    # The right certificate is only the first gate: without credentials, 401.
    with env.operator() as operator:
        assert operator.get(url).status_code == 401
        answer = operator.get(url, headers=master)
        assert answer.status_code == 200, answer.text
        metrics = operator.get(env.gateway.admin_url + "/metrics").text
    expiry = samples(
        metrics,
        "fairgate_tls_certificate_expiry_timestamp_seconds",
        listener="admin",
        serial=f"{env.pki.server.serial:x}",
    )
    assert expiry == env.pki.server.cert.not_valid_after_utc.timestamp()


def test_the_head_timeout_holds_over_tls(env: Env) -> None:
    sock = tls_connect(env)
    started = time.monotonic()
    sock.sendall(b"GET /v1/models HTTP/1.1\r\nhost: gateway\r\n")  # the head never ends
    received, ended = read_to_end(sock, 10 * HEAD_TIMEOUT)
    sock.close()
    assert received == b"" and ended in {"eof", "reset"}
    assert time.monotonic() - started < HEAD_TIMEOUT + 3


def test_a_handshake_never_started_is_closed_at_the_head_timeout(env: Env) -> None:
    sock = connect(env.gateway.host, env.gateway.port)  # TCP only, no ClientHello
    started = time.monotonic()
    received, ended = read_to_end(sock, 10 * HEAD_TIMEOUT)
    sock.close()
    assert received == b"" and ended in {"eof", "reset"}
    assert time.monotonic() - started < HEAD_TIMEOUT + 3


def test_a_reader_that_stops_reading_is_cut_off_over_tls(env: Env) -> None:
    def aborts() -> float:
        with env.operator() as operator:
            text = operator.get(env.gateway.admin_url + "/metrics").text
        return samples(text, "fairgate_stream_aborts_total", reason="client_fell_behind")

    before = aborts()
    sock = tls_connect(env, rcvbuf=4096, mss=1400)
    post(
        sock, "/v1/chat/completions", chat_body(stream=True, max_tokens=20_000)
    )  # 20 s at 1000 tokens/s
    assert read_until(sock, lambda got: b"data:" in got, 10)
    until(lambda: aborts() > before, 8 * CUT_AFTER, "the stream cut for falling behind")
    sock.close()


def peer_serial(sock: ssl.SSLSocket) -> int:
    der = sock.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def serial_served(env_gateway: GatewayProcess, ca: Authority) -> int:
    sock = ca.trusting().wrap_socket(
        socket.create_connection((env_gateway.host, env_gateway.port), timeout=10),
        server_hostname="127.0.0.1",
    )
    try:
        return peer_serial(sock)
    finally:
        sock.close()


def test_sighup_serves_a_new_certificate_and_keeps_open_streams(pki: Pki, tmp_path: Path) -> None:
    with ExitStack() as stack:
        sim = stack.enter_context(SimProcess("--model", "m", "--speed", "20", "--ttft", "0"))
        directory = tmp_path / "gw"
        config = write_config(
            directory, [model("m", sim)], **tls_config(directory, pki, health=PATIENT_HEALTH)
        )
        log = directory / "gateway.log"
        with stderr_into(log):
            gateway = stack.enter_context(GatewayProcess(config))
        assert gateway.pid is not None
        # A stream of 40 tokens at 20 a second: two seconds long.
        stream = pki.ca.trusting().wrap_socket(
            connect(gateway.host, gateway.port), server_hostname="127.0.0.1"
        )
        post(stream, "/v1/chat/completions", chat_body(stream=True, max_tokens=40))
        first = read_until(stream, lambda got: got.count(b"data:") >= 2, 10)
        assert first.startswith(b"HTTP/1.1 200")

        renewed = pki.ca.issue("gateway", server=True)
        renewed.write(directory, "server")
        os.kill(gateway.pid, signal.SIGHUP)
        until(
            lambda: serial_served(gateway, pki.ca) == renewed.serial,
            10,
            "the renewed certificate served to a new connection",
        )
        rest, _ = read_to_end(stream, 10)  # the stream opened before ends whole
        assert (first + rest).rstrip().endswith(b"data: [DONE]") or b"data: [DONE]" in rest
        assert peer_serial(stream) == pki.server.serial
        stream.close()

        # A broken certificate: the reload fails, names the file, and changes nothing.
        (directory / "server.crt").write_text("-----BEGIN CERTIFICATE-----\n")
        os.kill(gateway.pid, signal.SIGHUP)
        until(lambda: "TLS reload failed" in log.read_text(), 10, "the failed reload logged")
        text = log.read_text()
        assert "listen.tls.cert_file: no PEM certificate" in text
        assert str(directory / "server.crt") in text
        assert serial_served(gateway, pki.ca) == renewed.serial
        assert renewed.key_pem.splitlines()[1] not in text  # never the content
        # Still serving requests, and still stoppable as usual.
        with openai.OpenAI(
            base_url=gateway.url + "/v1",
            api_key=TEST_KEY,
            max_retries=0,
            http_client=httpx.Client(verify=pki.ca.trusting(), timeout=30),
        ) as client:
            assert [m.id for m in client.models.list().data] == ["m"]
        assert gateway.stop() == 0


def served_by(gateway: GatewayProcess, ca: Authority) -> tuple[int, str]:
    """(the serial a new connection is served, the answering worker's request-id prefix)."""
    sock = ca.trusting().wrap_socket(
        connect(gateway.host, gateway.port), server_hostname="127.0.0.1"
    )
    try:
        serial = peer_serial(sock)
        post(sock, "/v1/chat/completions", chat_body(stream=False, max_tokens=1))
        head = read_until(sock, lambda got: b"\r\n\r\n" in got, 30).split(b"\r\n\r\n")[0]
    finally:
        sock.close()
    assert head.startswith(b"HTTP/1.1 200"), head
    (request_id,) = [
        line.split(b":", 1)[1].strip().decode()
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"x-request-id:")
    ]
    return serial, request_id[:12]


def test_sighup_to_the_parent_of_workers_reloads_every_worker(
    pki: Pki, tmp_path: Path, redis_state: dict[str, Any]
) -> None:
    with ExitStack() as stack:
        sim = stack.enter_context(SimProcess("--model", "m", "--speed", "0"))
        directory = tmp_path / "gw"
        sections = tls_config(directory, pki, health=PATIENT_HEALTH, state=redis_state)
        config = write_config(directory, [model("m", sim)], **sections)
        gateway = stack.enter_context(GatewayProcess(config, "--workers", "2"))
        assert gateway.pid is not None
        seen: dict[str, int] = {}

        def both_workers(serial: int) -> bool:
            got, worker = served_by(gateway, pki.ca)
            seen[worker] = got  # the last serial each worker served
            return len(seen) == 2 and set(seen.values()) == {serial}

        until(lambda: both_workers(pki.server.serial), 30, "both workers answering")
        renewed = pki.ca.issue("gateway", server=True)
        renewed.write(directory, "server")
        os.kill(gateway.pid, signal.SIGHUP)  # the parent, which forwards it
        until(lambda: both_workers(renewed.serial), 30, "both workers on the renewed certificate")
        assert gateway.stop() == 0  # SIGHUP stopped neither the parent nor a worker
