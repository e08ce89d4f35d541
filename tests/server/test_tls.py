"""TLS on a listener in process: real sockets on 127.0.0.1, certificates made by a test CA.

The listener's limits (head timeout, abort, connection caps) hold over TLS, only
TLS 1.2 and later is spoken, a plain-HTTP client gets no answer, the admin
listener's client CA refuses certificates it did not issue, and a reload swaps
the certificate for new connections while a stream in progress carries on.
tests/e2e/test_tls.py shows the same against whole gateway processes.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import warnings
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from tests.server.test_protocol import HEAD_TIMEOUT, read_all, slow_stream
from tests.tls_certs import Authority, Issued, Pki, legacy_client_hello

from fairgate.config.secrets import SecretRef
from fairgate.config.tls import AdminTls
from fairgate.server.connections import ConnectionCaps
from fairgate.server.runner import Listener, bind, serve
from fairgate.server.tls import ServedTls


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki.make(tmp_path_factory.mktemp("pki"))


def tls_settings(directory: Path, issued: Issued, client_ca: Authority | None = None) -> AdminTls:
    cert, key = issued.write(directory, "server")
    ca = client_ca.write(directory / "clients.pem") if client_ca else None
    return AdminTls(
        cert_file=SecretRef(path=cert),
        key_file=SecretRef(path=key),
        client_ca_file=SecretRef(path=ca) if ca else None,
    )


@pytest.fixture
async def listen() -> AsyncIterator[Callable[..., Any]]:
    """``await listen(served_tls, caps=None)`` → (host, port) of a TLS listener serving
    ``slow_stream``; stopped after the test."""
    running: list[tuple[asyncio.Event, asyncio.Task[None], socket.socket]] = []

    async def start(tls: ServedTls, caps: ConnectionCaps | None = None) -> tuple[str, int]:
        sock = bind("127.0.0.1", 0)
        stop = asyncio.Event()
        listener = Listener(
            "client",
            echo_scheme,
            sock,
            HEAD_TIMEOUT,
            4096,
            64 * 1024,
            10.0,
            caps=caps,
            tls=tls.context,
        )
        running.append((stop, asyncio.create_task(serve([listener], grace=1.0, stop=stop)), sock))
        await asyncio.sleep(0.1)
        return sock.getsockname()[:2]

    yield start
    for stop, task, sock in running:
        stop.set()
        await asyncio.wait_for(task, 10)
        sock.close()


async def echo_scheme(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """``/scheme`` answers the scope's scheme; every other path is ``slow_stream``."""
    if scope["path"] != "/scheme":
        await slow_stream(scope, receive, send)
        return
    body = scope["scheme"].encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-length", b"%d" % len(body))],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def connect(
    address: tuple[str, int], context: ssl.SSLContext
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(*address, ssl=context, server_hostname="127.0.0.1")


def peer_serial(writer: asyncio.StreamWriter) -> int:
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    return x509.load_der_x509_certificate(der).serial_number


async def get(address: tuple[str, int], context: ssl.SSLContext, path: str) -> tuple[int, bytes]:
    reader, writer = await connect(address, context)
    serial = peer_serial(writer)
    writer.write(b"GET %s HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n" % path.encode())
    received, _ = await read_all(reader)
    writer.close()
    return serial, received


async def refused(address: tuple[str, int], context: ssl.SSLContext) -> bool:
    """Whether the server refuses this client's handshake. TLS 1.3 sends the client's
    certificate after the client considers the handshake done: the refusal may then
    arrive as the first read, or as nothing read at all."""
    try:
        _, received = await get(address, context, "/scheme")
    except (ssl.SSLError, ConnectionResetError):
        return True
    return received == b""


async def test_requests_are_served_over_tls_with_scheme_https(
    pki: Pki, listen: Any, tmp_path: Path
) -> None:
    address = await listen(ServedTls("client", "listen", tls_settings(tmp_path, pki.server)))
    serial, received = await get(address, pki.client(), "/scheme")
    assert serial == pki.server.serial
    assert received.startswith(b"HTTP/1.1 200 ") and received.endswith(b"\r\n\r\nhttps")


async def test_a_client_offering_only_tls_1_1_is_refused(
    pki: Pki, listen: Any, tmp_path: Path
) -> None:
    address = await listen(ServedTls("client", "listen", tls_settings(tmp_path, pki.server)))
    # A hand-made ClientHello for TLS 1.1 (no supported_versions extension), whatever the
    # local OpenSSL can still offer: no ServerHello comes back; a fatal protocol_version
    # alert at most (asyncio's transport drops it, uvloop's sends it).
    for version, answered in ((0x0302, False), (0x0301, False), (0x0303, True)):
        reader, writer = await asyncio.open_connection(*address)
        writer.write(legacy_client_hello(version))
        received = await reader.read(5)  # a record header, or the end
        writer.close()
        assert (received[:1] == b"\x16") is answered, hex(version)  # 0x16: ServerHello
        assert answered or received in (b"", b"\x15\x03\x03\x00\x02", b"\x15\x03\x01\x00\x02")
    # And the ssl module's own TLS 1.1 client, where this OpenSSL can still offer it.
    old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    old.load_verify_locations(cadata=pki.ca.pem)
    old.set_ciphers("DEFAULT:@SECLEVEL=0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the point of the test
        old.minimum_version = ssl.TLSVersion.TLSv1
        old.maximum_version = ssl.TLSVersion.TLSv1_1
    with pytest.raises((ssl.SSLError, ConnectionError)) as refused:
        await connect(address, old)
    if isinstance(refused.value, ssl.SSLError):  # else reset: the alert was dropped
        assert refused.value.reason in {
            "TLSV1_ALERT_PROTOCOL_VERSION",
            "NO_PROTOCOLS_AVAILABLE",
            "UNSUPPORTED_PROTOCOL",
        }
    # A TLS 1.2 client is served.
    modern = pki.client()
    modern.maximum_version = ssl.TLSVersion.TLSv1_2
    _, received = await get(address, modern, "/scheme")
    assert received.endswith(b"https")


async def test_plain_http_to_the_tls_port_gets_no_http_answer(
    pki: Pki, listen: Any, tmp_path: Path
) -> None:
    address = await listen(ServedTls("client", "listen", tls_settings(tmp_path, pki.server)))
    reader, writer = await asyncio.open_connection(*address)
    writer.write(b"GET /scheme HTTP/1.1\r\nhost: x\r\n\r\n")
    received, _ = await read_all(reader)
    writer.close()
    assert b"HTTP/1." not in received and b"https" not in received
    _, after = await get(address, pki.client(), "/scheme")  # the listener is still up
    assert after.endswith(b"https")


async def test_the_head_timeout_holds_over_tls(pki: Pki, listen: Any, tmp_path: Path) -> None:
    address = await listen(ServedTls("client", "listen", tls_settings(tmp_path, pki.server)))
    reader, writer = await connect(address, pki.client())
    writer.write(b"GET /scheme HTTP/1.1\r\nhost: x\r\n")  # the head never ends
    received, ended = await read_all(reader)  # read_all gives up after 10 s
    writer.close()
    assert received == b"" and ended in {"eof", "reset"}


async def test_a_handshake_that_never_starts_is_closed(
    pki: Pki, listen: Any, tmp_path: Path
) -> None:
    address = await listen(ServedTls("client", "listen", tls_settings(tmp_path, pki.server)))
    reader, writer = await asyncio.open_connection(*address)  # TCP only, no ClientHello
    received, ended = await read_all(reader)  # before read_all's 10 s: the timeout is 0.5 s
    writer.close()
    assert received == b"" and ended in {"eof", "reset"}


async def test_the_abort_extension_resets_a_tls_connection(
    pki: Pki, listen: Any, tmp_path: Path
) -> None:
    address = await listen(ServedTls("client", "listen", tls_settings(tmp_path, pki.server)))
    reader, writer = await connect(address, pki.client())
    writer.write(b"GET /abort HTTP/1.1\r\nhost: x\r\n\r\n")
    received, ended = await read_all(reader)
    writer.close()
    # The reset may overtake chunk0 (still on its way through the TLS layer): what
    # matters is that the stream is cut, not ended.
    assert b"chunk1" not in received
    assert ended == "reset"


async def test_the_connection_cap_answers_503_over_tls(
    pki: Pki, listen: Any, tmp_path: Path
) -> None:
    tls = ServedTls("client", "listen", tls_settings(tmp_path, pki.server))
    address = await listen(tls, caps=ConnectionCaps("client", total=1, per_network=None))
    held = await connect(address, pki.client())
    reader, writer = await connect(address, pki.client())
    received, _ = await read_all(reader)
    writer.close()
    held[1].close()
    assert received.startswith(b"HTTP/1.1 503 ") and b"too_many_connections" in received


async def test_the_client_ca_refuses_clients_it_did_not_certify(
    pki: Pki, listen: Any, tmp_path: Path
) -> None:
    tls = ServedTls("admin", "admin_listen", tls_settings(tmp_path, pki.server, client_ca=pki.ca))
    address = await listen(tls)
    assert await refused(address, pki.client())  # no certificate
    foreign = pki.other.issue("intruder")
    assert await refused(address, foreign.client_context(pki.ca, pki.directory))  # another CA's
    _, received = await get(address, pki.client(issued=pki.ca.issue("operator")), "/scheme")
    assert received.endswith(b"https")


async def test_a_reload_serves_the_new_certificate_and_keeps_open_streams(
    pki: Pki, listen: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tls = ServedTls("client", "listen", tls_settings(tmp_path, pki.server))
    address = await listen(tls)
    reader, writer = await connect(address, pki.client())
    writer.write(b"GET /stream HTTP/1.1\r\nhost: x\r\n\r\n")  # ten chunks over a second
    assert b"chunk0" in await reader.readuntil(b"chunk0\n")
    renewed = pki.ca.issue("gateway", server=True)
    renewed.write(tmp_path, "server")  # the files the references name
    assert await tls.reload()
    serial, _ = await get(address, pki.client(), "/scheme")
    assert serial == renewed.serial != pki.server.serial
    # The stream opened before carries on to its end, on the certificate it began with.
    rest = await asyncio.wait_for(reader.readuntil(b"\r\n0\r\n\r\n"), 10)
    assert rest.endswith(b"chunk9\n\r\n0\r\n\r\n")
    assert peer_serial(writer) == pki.server.serial
    writer.close()

    # A broken certificate file: the reload fails, the renewed certificate is still served.
    (tmp_path / "server.crt").write_text(
        "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n"
    )
    with caplog.at_level(logging.ERROR, logger="fairgate.server.tls"):
        assert not await tls.reload()
    assert str(tmp_path / "server.crt") in caplog.text and "cert_file" in caplog.text
    serial, _ = await get(address, pki.client(), "/scheme")
    assert serial == renewed.serial
    # A key that does not match: refused the same way, naming the key file.
    (tmp_path / "server.crt").write_text(pki.server.cert_pem)
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="fairgate.server.tls"):
        assert not await tls.reload()
    assert str(tmp_path / "server.key") in caplog.text and "does not match" in caplog.text
    assert renewed.key_pem.splitlines()[1] not in caplog.text  # never the content
    serial, _ = await get(address, pki.client(), "/scheme")
    assert serial == renewed.serial
    assert tls.reloads == {"ok": 1, "failed": 2}


def blocking_get(
    address: tuple[str, int], context: ssl.SSLContext, session: ssl.SSLSession | None
) -> tuple[bytes, ssl.SSLSession | None, bool]:
    """GET /scheme offering ``session`` for resumption: (bytes read, the session, resumed)."""
    with socket.create_connection(address, timeout=10) as raw:
        sock = context.wrap_socket(raw, server_hostname="127.0.0.1", session=session)
        with sock:
            sock.sendall(b"GET /scheme HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            received = b""
            while chunk := sock.recv(65536):
                received += chunk
            return received, sock.session, sock.session_reused


async def test_a_client_ca_listener_resumes_no_session_and_speaks_only_tls_1_3(
    pki: Pki, listen: Any, tmp_path: Path
) -> None:
    tls = ServedTls("admin", "admin_listen", tls_settings(tmp_path, pki.server, client_ca=pki.ca))
    address = await listen(tls)
    operator = pki.client(issued=pki.ca.issue("operator"))
    received, session, _ = await asyncio.to_thread(blocking_get, address, operator, None)
    assert received.endswith(b"https")
    # The operators' CA is replaced: the old client's session must not stand in for
    # a certificate the new CA never issued.
    pki.other.write(tmp_path / "clients.pem")
    assert await tls.reload()
    try:
        received, _, resumed = await asyncio.to_thread(blocking_get, address, operator, session)
    except (ssl.SSLError, ConnectionError):
        received, resumed = b"", False
    assert not resumed and received == b""
    # TLS 1.2 is not spoken where client certificates are verified.
    old = pki.other.issue("operator").client_context(pki.ca, pki.directory)
    old.maximum_version = ssl.TLSVersion.TLSv1_2
    assert await refused(address, old)


async def test_a_reload_swaps_the_client_ca(pki: Pki, listen: Any, tmp_path: Path) -> None:
    tls = ServedTls("admin", "admin_listen", tls_settings(tmp_path, pki.server, client_ca=pki.ca))
    address = await listen(tls)
    old_client = pki.client(issued=pki.ca.issue("operator"))
    _, received = await get(address, old_client, "/scheme")
    assert received.endswith(b"https")
    pki.other.write(tmp_path / "clients.pem")  # the operators' CA changes
    assert await tls.reload()
    assert await refused(address, old_client)
    new_client = pki.other.issue("operator").client_context(pki.ca, pki.directory)
    _, received = await get(address, new_client, "/scheme")
    assert received.endswith(b"https")


async def test_a_certificate_held_in_the_vault_follows_its_new_value(
    pki: Pki, listen: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The vault refresher stores each new value in the reference's cell; the listener
    reloads once both halves of a rotated pair have arrived, without a SIGHUP."""
    cert = SecretRef.model_validate("vault:secret/gateway/tls#cert")
    key = SecretRef.model_validate("vault:secret/gateway/tls#key")
    cert.cell.set(pki.server.cert_pem)  # as read_vault_secrets does before serving
    key.cell.set(pki.server.key_pem)
    tls = ServedTls("client", "listen", AdminTls(cert_file=cert, key_file=key))
    address = await listen(tls)
    assert (await get(address, pki.client(), "/scheme"))[0] == pki.server.serial
    renewed = pki.ca.issue("gateway", server=True)
    with caplog.at_level(logging.ERROR, logger="fairgate.server.tls"):
        cert.cell.set(renewed.cert_pem)  # the refresher reads the two one after the other
        await asyncio.sleep(0.05)
        key.cell.set(renewed.key_pem)
        for _ in range(50):  # bounded: VAULT_SETTLE is 1 s
            await asyncio.sleep(0.1)
            if tls.reloads["ok"]:
                break
    assert tls.reloads == {"ok": 1, "failed": 0}  # one reload, of the whole pair
    assert caplog.text == ""
    assert (await get(address, pki.client(), "/scheme"))[0] == renewed.serial
