"""The pool against real peers on 127.0.0.1: reuse, the keep-alive race, bounds, expiry,
connect failures, TLS, the exact request on the wire. Each test runs on both loops."""

from __future__ import annotations

import asyncio
import contextlib
import select
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from fairgate.upstream.errors import (
    UpstreamClosedBeforeAnswer,
    UpstreamConnectError,
    UpstreamConnectTimeout,
    UpstreamProtocolError,
)
from fairgate.upstream.pool import UpstreamPool

from .peer import Handler, PeerConn, pool_of, serving

BOTH_LOOPS = True


async def fetch(pool: UpstreamPool, port: int, *, tls: bool = False) -> bytes:
    async with asyncio.timeout(10):
        response = await pool.request("POST", "127.0.0.1", port, b"/v1/x", [], b"{}", tls=tls)
        body = await response.read_all(1 << 20)
    response.release()
    return body


async def test_sequential_requests_share_one_connection() -> None:
    async with serving() as peer, pool_of() as pool:
        for _ in range(5):
            await fetch(pool, peer.port)
        assert peer.accepted == 1 and len(peer.requests) == 5
        assert pool.idle_connections() == 1


async def answer_with_index(conn: PeerConn) -> None:
    """Answer every request with the number of the connection that carried it."""
    while await conn.read_request() is not None:
        await conn.answer(b"%d" % conn.index)


async def test_the_warmest_idle_connection_is_reused_first() -> None:
    async with serving(answer_with_index) as peer, pool_of() as pool:
        first, second = await asyncio.gather(
            pool.request("GET", "127.0.0.1", peer.port, b"/", [], b""),
            pool.request("GET", "127.0.0.1", peer.port, b"/", [], b""),
        )
        carried = [await response.read_all(100) for response in (first, second)]
        assert sorted(carried) == [b"0", b"1"]
        second.release()
        first.release()  # released last: the warmest
        assert await fetch(pool, peer.port) == carried[0]
        assert peer.accepted == 2


async def test_idle_connections_are_bounded_per_host() -> None:
    async with serving() as peer, pool_of(max_idle_per_host=2) as pool:
        responses = await asyncio.gather(
            *(pool.request("GET", "127.0.0.1", peer.port, b"/", [], b"") for _ in range(5))
        )
        for response in responses:
            await response.read_all(1 << 20)
            response.release()
        assert pool.idle_connections() == 2
        await peer.wait_client_closed(3)
        for _ in range(4):
            await fetch(pool, peer.port)
        assert peer.accepted == 5  # the two kept ones served the rest


async def test_no_idle_connection_is_kept_with_a_bound_of_zero() -> None:
    async with serving() as peer, pool_of(max_idle_per_host=0) as pool:
        await fetch(pool, peer.port)
        await fetch(pool, peer.port)
        assert peer.accepted == 2


async def test_idle_connections_expire_after_the_idle_timeout() -> None:
    async with serving() as peer, pool_of(idle_timeout=0.3) as pool:
        await fetch(pool, peer.port)
        assert pool.idle_connections() == 1 and peer.client_closed == 0
        await peer.wait_client_closed(1)  # the pool closed it, unused
        assert pool.idle_connections() == 0
        await fetch(pool, peer.port)
        assert peer.accepted == 2


async def test_a_connection_the_server_closed_while_idle_is_dropped() -> None:
    async def once(conn: PeerConn) -> None:
        await conn.read_request()
        await conn.answer()
        conn.close()  # keep-alive promised, then closed while idle

    async with serving(once) as peer, pool_of() as pool:
        await fetch(pool, peer.port)
        async with asyncio.timeout(10):
            while pool.idle_connections():
                await asyncio.sleep(0.01)
        await fetch(pool, peer.port)
        assert peer.accepted == 2 and len(peer.requests) == 2


def close_on_reuse(how: str) -> Handler:
    """The first connection answers its first request, then reads the next one whole and
    closes (FIN) or resets (RST) without answering; later connections answer."""

    async def handler(conn: PeerConn) -> None:
        while await conn.read_request() is not None:
            if conn.index == 0 and conn.served > 1:
                conn.close() if how == "close" else conn.reset()
                return
            await conn.answer()

    return handler


@pytest.mark.parametrize("how", ["close", "reset"])
async def test_a_request_read_whole_then_left_unanswered_is_never_sent_again(how: str) -> None:
    async with serving(close_on_reuse(how)) as peer, pool_of() as pool:
        assert await fetch(pool, peer.port) == b"ok"
        with pytest.raises(UpstreamProtocolError) as raised:
            await fetch(pool, peer.port)  # the server may be generating: no second copy
        assert not isinstance(raised.value, UpstreamClosedBeforeAnswer)
        assert peer.accepted == 1 and len(peer.requests) == 2


class IdleClosingPeer:
    """A blocking server on its own thread: it answers one request per connection, and
    closes the connection (idle, keep-alive promised) when the test says so, so that the
    close waits in the client's kernel while the client's event loop has not run yet."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.close_now = threading.Event()
        self.closed = threading.Event()
        self.requests = 0
        self.accepted = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        for _ in range(2):
            conn, _ = self.listener.accept()
            self.accepted += 1
            with conn:
                conn.settimeout(10)
                data = b""
                while not data.endswith(b"{}"):
                    data += conn.recv(65536)
                self.requests += 1
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                if self.accepted == 1:
                    self.close_now.wait(10)
            self.closed.set()

    def stop(self) -> None:
        self.listener.close()
        self.thread.join(10)


async def test_a_connection_closed_while_idle_is_replaced_before_the_request_goes_out() -> None:
    peer = IdleClosingPeer()
    try:
        async with pool_of() as pool:
            assert await fetch(pool, peer.port) == b"ok"
            assert pool.idle_connections() == 1
            peer.close_now.set()
            # Blocks the loop on purpose: the close reaches this kernel, not the loop.
            assert peer.closed.wait(10)
            assert await fetch(pool, peer.port) == b"ok"  # no error for the caller
        assert peer.accepted == 2 and peer.requests == 2  # and the request went out once
    finally:
        peer.stop()


async def test_a_fresh_connection_closed_before_an_answer_is_not_retried() -> None:
    async def handler(conn: PeerConn) -> None:
        await conn.read_request()
        conn.close()

    async with serving(handler) as peer, pool_of() as pool:
        with pytest.raises(UpstreamProtocolError, match="after the request was sent"):
            await fetch(pool, peer.port)
        assert peer.accepted == 1


async def test_no_retry_once_a_byte_of_the_answer_came() -> None:
    async def handler(conn: PeerConn) -> None:
        while await conn.read_request() is not None:
            if conn.served == 1:
                await conn.answer()
                continue
            await conn.send(b"HTTP/1.1 200 OK\r\n")
            conn.close()
            return

    async with serving(handler) as peer, pool_of() as pool:
        await fetch(pool, peer.port)
        with pytest.raises(UpstreamProtocolError, match="before a complete head"):
            await fetch(pool, peer.port)
        assert peer.accepted == 1 and len(peer.requests) == 2


async def test_the_request_carries_exactly_the_given_headers() -> None:
    headers = [(b"Content-Type", b"application/json"), (b"x-request-id", b"r1")]
    async with serving() as peer, pool_of() as pool:
        response = await pool.request("POST", "127.0.0.1", peer.port, b"/v1/a?b=c", headers, b"{}")
        echoed = await response.read_all(1 << 20)
        response.release()
        host = b"127.0.0.1:%d" % peer.port
        assert echoed == (
            b"POST /v1/a?b=c HTTP/1.1\r\nContent-Type: application/json\r\nx-request-id: r1\r\n"
            b"host: " + host + b"\r\ncontent-length: 2\r\n\r\n"
        )
        given_host = [(b"Host", b"engine.internal")]
        response = await pool.request("GET", "127.0.0.1", peer.port, b"/health", given_host, b"")
        assert await response.read_all(1 << 20) == (
            b"GET /health HTTP/1.1\r\nHost: engine.internal\r\n\r\n"
        )
        response.release()
        assert peer.requests[0][1] == b"{}"


async def test_connection_close_asked_by_the_caller_is_not_pooled() -> None:
    async with serving() as peer, pool_of() as pool:
        headers = [(b"connection", b"close")]
        for _ in range(2):
            response = await pool.request("GET", "127.0.0.1", peer.port, b"/", headers, b"")
            await response.read_all(1 << 20)
            response.release()
        assert peer.accepted == 2 and pool.idle_connections() == 0


async def test_connect_refused_is_a_connect_error(closed_port: int) -> None:
    async with pool_of() as pool:
        with pytest.raises(UpstreamConnectError) as caught:
            await fetch(pool, closed_port)
        assert not isinstance(caught.value, UpstreamConnectTimeout)
        assert f"127.0.0.1:{closed_port}" in str(caught.value)


@contextlib.contextmanager
def unanswered_port() -> Iterator[int]:
    """A listening port whose accept queue is full: a new connect hangs in SYN-SENT."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        port = server.getsockname()[1]
        fillers: list[socket.socket] = []
        try:
            for _ in range(64):
                filler = socket.socket()
                filler.setblocking(False)
                fillers.append(filler)
                filler.connect_ex(("127.0.0.1", port))
                if not select.select([], [filler], [], 0.2)[1]:
                    break  # this one hangs: the queue is full
            else:
                pytest.skip("the kernel completed every connect; cannot leave one hanging")
            yield port
        finally:
            for filler in fillers:
                filler.close()


async def test_connect_timeout() -> None:
    with unanswered_port() as port:
        async with pool_of(connect_timeout=0.3) as pool:
            with pytest.raises(UpstreamConnectTimeout, match=r"within 0\.3s"):
                async with asyncio.timeout(20):
                    await fetch(pool, port)


async def test_cancelled_while_connecting_leaves_nothing_behind() -> None:
    with unanswered_port() as port:
        async with pool_of(connect_timeout=30) as pool:
            with pytest.raises(TimeoutError):  # the caller's deadline, not the connect timeout
                async with asyncio.timeout(0.3):
                    await fetch(pool, port)
            assert pool.idle_connections() == 0


async def test_a_closed_pool_refuses_requests_and_closes_idle_connections() -> None:
    async with serving() as peer:
        pool = UpstreamPool(connect_timeout=5)
        await fetch(pool, peer.port)
        await pool.close()
        await peer.wait_client_closed(1)
        with pytest.raises(RuntimeError):
            await fetch(pool, peer.port)


# -- TLS ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1, made by the openssl command."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    return cert, key


async def test_tls_requests_verify_the_engine_certificate(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)
    trusting = ssl.create_default_context(cafile=str(cert))
    async with serving(ssl=server_context) as peer:
        async with pool_of(ssl_context=trusting) as pool:
            echoed = await fetch(pool, peer.port, tls=True)
            await fetch(pool, peer.port, tls=True)
            assert echoed.startswith(b"POST /v1/x HTTP/1.1\r\n")
            assert peer.accepted == 1
        async with pool_of() as pool:  # the system's trust store: a self-signed one fails
            with pytest.raises(UpstreamConnectError, match="TLS"):
                await fetch(pool, peer.port, tls=True)


async def test_settings_out_of_range_are_refused() -> None:
    for bad in ({"connect_timeout": 0}, {"connect_timeout": 1, "idle_timeout": -1},
                {"connect_timeout": 1, "max_idle_per_host": -1},
                {"connect_timeout": 1, "max_response_head_bytes": 0}):  # fmt: skip
        with pytest.raises(ValueError):
            UpstreamPool(**bad)  # type: ignore[arg-type]


def test_the_client_is_exported_from_the_package() -> None:
    import fairgate.upstream as package
    from fairgate.upstream import errors

    assert {"UpstreamPool", "UpstreamResponse", *errors.__all__} <= set(package.__all__)
    assert all(getattr(package, name) is getattr(errors, name) for name in errors.__all__)


def test_a_pool_built_before_the_loop_runs_binds_to_it_at_first_use() -> None:
    pool = UpstreamPool(connect_timeout=5)

    async def use() -> int:
        async with serving() as peer:
            await fetch(pool, peer.port)
            await fetch(pool, peer.port)
            await pool.close()
            return peer.accepted

    assert asyncio.run(use()) == 1
