"""The answer's handle: header lookup, whole-body reads within a limit, and the end of a
response (release or close) seen from a server on 127.0.0.1."""

from __future__ import annotations

import pytest

from fairgate.upstream.errors import UpstreamTooLarge

from .peer import PeerConn, pool_of, serving

BOTH_LOOPS = True


async def answer_sized(conn: PeerConn) -> None:
    """``/N`` answers N bytes; ``/chunked/N`` the same without a declared length."""
    while (request := await conn.read_request()) is not None:
        target = request[0].split(b" ")[1]
        size = int(target.rsplit(b"/", 1)[1])
        if target.startswith(b"/chunked/"):
            await conn.send(
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n%x\r\n" % size
                + b"z" * size
                + b"\r\n0\r\n\r\n"
            )
        else:
            await conn.answer(b"z" * size, extra=b"X-Dup: a\r\nx-dup: b\r\n")


async def test_header_lookup_ignores_case_and_gives_the_first_value() -> None:
    async with serving(answer_sized) as peer, pool_of() as pool:
        response = await pool.request("GET", "127.0.0.1", peer.port, b"/3", [], b"")
        assert response.header(b"X-DUP") == b"a"
        assert response.header(b"x-missing") is None
        assert (b"x-dup", b"b") in response.headers
        response.release()


@pytest.mark.parametrize("target", [b"/100", b"/chunked/100"])
async def test_read_all_within_the_limit(target: bytes) -> None:
    async with serving(answer_sized) as peer, pool_of() as pool:
        response = await pool.request("GET", "127.0.0.1", peer.port, target, [], b"")
        assert await response.read_all(100) == b"z" * 100
        response.release()
        assert await response.read_chunk() == b""  # ended cleanly: nothing more
        assert pool.idle_connections() == 1


@pytest.mark.parametrize("target", [b"/101", b"/chunked/101"])
async def test_read_all_past_the_limit_raises_and_closes(target: bytes) -> None:
    async with serving(answer_sized) as peer, pool_of() as pool:
        response = await pool.request("GET", "127.0.0.1", peer.port, target, [], b"")
        with pytest.raises(UpstreamTooLarge):
            await response.read_all(100)
        response.release()
        assert pool.idle_connections() == 0
        await peer.wait_client_closed(1)


async def test_release_and_close_are_idempotent_and_final() -> None:
    async with serving(answer_sized) as peer, pool_of() as pool:
        response = await pool.request("GET", "127.0.0.1", peer.port, b"/5", [], b"")
        await response.read_all(5)
        response.release()
        response.release()
        response.close()  # after release: the pooled connection is not touched
        assert pool.idle_connections() == 1
        again = await pool.request("GET", "127.0.0.1", peer.port, b"/5", [], b"")
        assert await again.read_all(5) == b"zzzzz"
        again.release()
        assert peer.accepted == 1
