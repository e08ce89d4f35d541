"""The HTTP/1.1 connection against real peers on 127.0.0.1 that frame, stall and break
answers on purpose: every body framing, 1xx, keep-alive rules, bounded heads, flow
control and cancellation. Each test runs on asyncio's loop and on uvloop."""

from __future__ import annotations

import asyncio

import pytest

from fairgate.upstream.errors import UpstreamProtocolError
from fairgate.upstream.pool import UpstreamPool
from fairgate.upstream.response import UpstreamResponse

from .peer import Handler, PeerConn, pool_of, serving

BOTH_LOOPS = True
SECRET = b"sk-internal-0123456789"


async def post(pool: UpstreamPool, port: int, method: str = "POST") -> UpstreamResponse:
    async with asyncio.timeout(10):
        return await pool.request(method, "127.0.0.1", port, b"/v1/x", [], b"{}")


async def read_body(response: UpstreamResponse) -> list[bytes]:
    """Every piece ``read_chunk`` returns, until ``b""``."""
    pieces = []
    async with asyncio.timeout(10):
        while chunk := await response.read_chunk():
            pieces.append(chunk)
    return pieces


def answering(*parts: bytes, then_close: bool = False) -> Handler:
    """A handler that answers every request by writing ``parts``, one send each."""

    async def handler(conn: PeerConn) -> None:
        while await conn.read_request() is not None:
            for part in parts:
                await conn.send(part)
                await asyncio.sleep(0.01)  # most likely separate reads on the client
            if then_close:
                conn.close()
                return

    return handler


# -- framing ------------------------------------------------------------------------------


async def test_content_length_body_arrives_whole_and_the_connection_is_reused() -> None:
    handler = answering(b"HTTP/1.1 200 OK\r\nContent-Type: a/b\r\nContent-Length: 5\r\n\r\nhello")
    async with serving(handler) as peer, pool_of() as pool:
        for _ in range(3):
            response = await post(pool, peer.port)
            assert response.status == 200
            assert response.content_length == 5
            assert response.header(b"Content-Type") == b"a/b"
            assert response.headers == [(b"content-type", b"a/b"), (b"content-length", b"5")]
            assert b"".join(await read_body(response)) == b"hello"
            assert await response.read_chunk() == b""
            response.release()
        assert peer.accepted == 1 and len(peer.requests) == 3


async def test_chunked_body_is_dechunked_as_it_arrives() -> None:
    gate = asyncio.Event()

    async def handler(conn: PeerConn) -> None:
        while await conn.read_request() is not None:
            await conn.send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhel")
            await gate.wait()
            await conn.send(b"lo\r\n6\r\n world\r\n0\r\nx-trailer: t\r\n\r\n")

    async with serving(handler) as peer, pool_of() as pool:
        response = await post(pool, peer.port)
        assert response.content_length is None
        assert await response.read_chunk() == b"hel"  # before the rest was even sent
        gate.set()
        assert b"".join(await read_body(response)) == b"lo world"
        response.release()
        again = await post(pool, peer.port)
        assert b"".join(await read_body(again)) == b"hello world"
        again.release()
        assert peer.accepted == 1


async def test_close_delimited_body_ends_at_the_close() -> None:
    handler = answering(b"HTTP/1.1 200 OK\r\n\r\npart one, ", b"part two", then_close=True)
    async with serving(handler) as peer, pool_of() as pool:
        response = await post(pool, peer.port)
        assert b"".join(await read_body(response)) == b"part one, part two"
        response.release()
        assert pool.idle_connections() == 0


async def test_http10_answers_end_keep_alive_unless_asked() -> None:
    plain = answering(b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok")
    kept = answering(b"HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 2\r\n\r\nok")
    async with serving(plain) as peer, pool_of() as pool:
        for _ in range(2):
            response = await post(pool, peer.port)
            assert b"".join(await read_body(response)) == b"ok"
            response.release()
        assert peer.accepted == 2
    async with serving(kept) as peer, pool_of() as pool:
        for _ in range(2):
            response = await post(pool, peer.port)
            assert b"".join(await read_body(response)) == b"ok"
            response.release()
        assert peer.accepted == 1


async def test_http10_body_without_length_runs_to_the_close() -> None:
    handler = answering(b"HTTP/1.0 200 OK\r\n\r\nall of it", then_close=True)
    async with serving(handler) as peer, pool_of() as pool:
        response = await post(pool, peer.port)
        assert b"".join(await read_body(response)) == b"all of it"
        response.release()


@pytest.mark.parametrize("status", [204, 304])
async def test_no_body_statuses_end_at_the_head(status: int) -> None:
    head = b"HTTP/1.1 %d X\r\ncontent-length: 0\r\n\r\n" % status
    async with serving(answering(head)) as peer, pool_of() as pool:
        for _ in range(2):
            response = await post(pool, peer.port)
            assert response.status == status
            assert await response.read_chunk() == b""
            response.release()
        assert peer.accepted == 1


async def test_head_answer_has_no_body_whatever_its_length_says() -> None:
    handler = answering(b"HTTP/1.1 200 OK\r\ncontent-length: 1234\r\n\r\n")
    async with serving(handler) as peer, pool_of() as pool:
        response = await post(pool, peer.port, "HEAD")
        assert response.content_length == 1234
        assert await response.read_chunk() == b""
        response.release()
        response = await post(pool, peer.port, "HEAD")  # the same connection, parsed afresh
        assert response.status == 200 and await response.read_all(10) == b""
        response.release()
        assert peer.accepted == 1


async def test_informational_answers_are_skipped() -> None:
    handler = answering(
        b"HTTP/1.1 100 Continue\r\n\r\n",
        b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n",
        b"HTTP/1.1 201 Created\r\ncontent-length: 4\r\n\r\ndone",
    )
    async with serving(handler) as peer, pool_of() as pool:
        response = await post(pool, peer.port)
        assert response.status == 201
        assert response.headers == [(b"content-length", b"4")]
        assert b"".join(await read_body(response)) == b"done"
        response.release()


async def test_a_redirect_is_an_answer_not_followed() -> None:
    handler = answering(
        b"HTTP/1.1 307 X\r\nlocation: http://10.9.9.9/\r\ncontent-length: 0\r\n\r\n"
    )
    async with serving(handler) as peer, pool_of() as pool:
        response = await post(pool, peer.port)
        assert response.status == 307
        assert response.header(b"location") == b"http://10.9.9.9/"
        response.release()
        assert len(peer.requests) == 1


async def test_connection_close_from_the_server_is_honoured() -> None:
    handler = answering(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok")
    async with serving(handler) as peer, pool_of() as pool:
        for _ in range(2):
            response = await post(pool, peer.port)
            assert b"".join(await read_body(response)) == b"ok"
            response.release()
        assert peer.accepted == 2 and pool.idle_connections() == 0


async def test_bytes_after_the_answer_end_the_connection() -> None:
    handler = answering(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n")
    async with serving(handler) as peer, pool_of() as pool:
        response = await post(pool, peer.port)
        assert b"".join(await read_body(response)) == b"ok"
        response.release()
        response = await post(pool, peer.port)
        response.release()
        assert peer.accepted == 2


# -- broken answers -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n",
    ],
    ids=["content-length", "chunked"],
)
async def test_a_close_mid_body_is_an_error_after_the_bytes_that_came(answer: bytes) -> None:
    async with serving(answering(answer, then_close=True)) as peer, pool_of() as pool:
        response = await post(pool, peer.port)
        received = b""
        with pytest.raises(UpstreamProtocolError, match="mid-body"):
            async with asyncio.timeout(10):
                while chunk := await response.read_chunk():
                    received += chunk
        assert received in (b"short", b"hello")
        response.release()
        with pytest.raises(UpstreamProtocolError):
            await response.read_chunk()


async def test_a_close_mid_head_is_an_error() -> None:
    handler = answering(b"HTTP/1.1 200 OK\r\ncontent-le", then_close=True)
    async with serving(handler) as peer, pool_of() as pool:
        with pytest.raises(UpstreamProtocolError, match="before a complete head"):
            await post(pool, peer.port)
        assert peer.accepted == 1  # a byte of the answer came: never retried


async def test_malformed_answer_is_an_error_without_header_values() -> None:
    handler = answering(b"HTTP/1.1 200 OK\r\nx-echo: " + SECRET + b"\x01\r\n\r\n")
    async with serving(handler) as peer, pool_of() as pool:
        with pytest.raises(UpstreamProtocolError, match="malformed") as caught:
            await post(pool, peer.port)
        assert SECRET not in str(caught.value).encode()
        assert caught.value.__cause__ is None and caught.value.__context__ is None


async def test_an_upgrade_nobody_asked_for_is_an_error() -> None:
    handler = answering(b"HTTP/1.1 101 Switching Protocols\r\nupgrade: h2c\r\n\r\n")
    async with serving(handler) as peer, pool_of() as pool:
        with pytest.raises(UpstreamProtocolError, match="switched protocols"):
            await post(pool, peer.port)


async def test_a_head_over_the_limit_is_refused() -> None:
    big = b"HTTP/1.1 200 OK\r\nx-big: " + b"a" * 5000 + b"\r\ncontent-length: 0\r\n\r\n"
    async with serving(answering(big)) as peer, pool_of(max_response_head_bytes=4096) as pool:
        with pytest.raises(UpstreamProtocolError, match="larger than 4096"):
            await post(pool, peer.port)


async def test_an_endless_head_is_refused_while_it_grows() -> None:
    sent = 0

    async def endless(conn: PeerConn) -> None:
        nonlocal sent
        await conn.read_request()
        await conn.send(b"HTTP/1.1 200 OK\r\nx-endless: ")
        while sent < 64 * 1024 * 1024:
            await conn.send(b"a" * 16384)
            sent += 16384

    async with serving(endless) as peer, pool_of(max_response_head_bytes=65536) as pool:
        with pytest.raises(UpstreamProtocolError, match="larger than 65536"):
            async with asyncio.timeout(20):
                await post(pool, peer.port)
        assert sent < 64 * 1024 * 1024  # refused long before the peer gave up


# -- flow control and cancellation --------------------------------------------------------


async def test_a_reader_that_stops_reading_holds_the_engine_back() -> None:
    total = 96 * 1024 * 1024  # more than the kernel buffers on both sides can hold
    sent = 0

    async def firehose(conn: PeerConn) -> None:
        nonlocal sent
        await conn.read_request()
        conn.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % total)
        piece = b"x" * 65536
        while sent < total:
            await conn.send(piece)
            sent += len(piece)

    async with serving(firehose) as peer, pool_of() as pool:
        response = await post(pool, peer.port)
        last = -1
        async with asyncio.timeout(20):  # until the peer can send no more
            while sent != last:
                last = sent
                await asyncio.sleep(0.3)
        assert sent < total
        received = 0
        async with asyncio.timeout(20):
            while chunk := await response.read_chunk():
                received += len(chunk)
        assert received == total == sent
        response.release()


async def test_cancelled_while_reading_the_body_closes_the_connection() -> None:
    async def stalls(conn: PeerConn) -> None:
        await conn.read_request()
        await conn.send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n")
        await conn.wait_closed_by_client()

    async with serving(stalls) as peer, pool_of() as pool:
        response = await post(pool, peer.port)
        assert await response.read_chunk() == b"hello"
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await response.read_chunk()
        await peer.wait_client_closed(1)  # the engine sees the disconnect
        response.release()
        assert pool.idle_connections() == 0


async def test_cancelled_while_waiting_for_the_head_closes_the_connection() -> None:
    async def silent(conn: PeerConn) -> None:
        await conn.read_request()
        await conn.wait_closed_by_client()

    async with serving(silent) as peer, pool_of() as pool:
        task = asyncio.create_task(post(pool, peer.port))
        async with asyncio.timeout(10):
            while not peer.requests:
                await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await peer.wait_client_closed(1)
        assert pool.idle_connections() == 0


async def test_close_abandons_an_answer_and_release_of_a_partial_body_closes() -> None:
    async def slow(conn: PeerConn) -> None:
        await conn.read_request()
        await conn.send(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhalf ")
        await conn.wait_closed_by_client()

    async with serving(slow) as peer, pool_of() as pool:
        first = await post(pool, peer.port)
        first.close()
        first.close()  # idempotent
        second = await post(pool, peer.port)
        assert await second.read_chunk() == b"half "
        second.release()  # the body is not complete: closed, not pooled
        await peer.wait_client_closed(2)
        assert peer.accepted == 2 and pool.idle_connections() == 0
