"""The listener's protocol in process: real sockets on 127.0.0.1, a tiny ASGI app.

The end-to-end tests (tests/e2e/test_slowloris.py, test_slow_readers.py) show the
limits against a whole gateway; these pin down the cases between requests on
one connection, which a whole gateway makes hard to reach.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest

from fairgate.server.connections import ConnectionCaps
from fairgate.server.protocol import ABORT_EXTENSION
from fairgate.server.runner import Listener, bind, serve

HEAD_TIMEOUT = 0.5
App = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


async def slow_stream(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Ten chunks, a tenth of a second apart; ``/abort`` resets the connection after one."""
    await send({"type": "http.response.start", "status": 200, "headers": []})
    for index in range(10):
        await send({"type": "http.response.body", "body": b"chunk%d\n" % index, "more_body": True})
        if scope["path"] == "/abort":
            scope["extensions"][ABORT_EXTENSION]()
            return
        await asyncio.sleep(0.1)
    await send({"type": "http.response.body", "body": b""})


@asynccontextmanager
async def serving(app: App) -> AsyncIterator[tuple[str, int]]:
    """``app`` on a listener of the gateway's own protocol, on a free port."""
    sock = bind("127.0.0.1", 0)
    stop = asyncio.Event()
    listener = Listener("client", app, sock, HEAD_TIMEOUT, 4096, 64 * 1024, 10.0)
    task = asyncio.create_task(serve([listener], grace=1.0, stop=stop))
    for _ in range(100):  # bounded: the listener is up within a second
        try:
            _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        except OSError:
            await asyncio.sleep(0.01)
            continue
        writer.close()
        break
    yield sock.getsockname()[:2]
    stop.set()
    await asyncio.wait_for(task, 10)
    sock.close()


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, int]]:
    async with serving(slow_stream) as address:
        yield address


async def read_all(reader: asyncio.StreamReader) -> tuple[bytes, str]:
    received = b""
    try:
        async with asyncio.timeout(10):
            while chunk := await reader.read(65536):
                received += chunk
    except ConnectionResetError:
        return received, "reset"
    return received, "eof"


async def test_a_partial_head_after_a_request_does_not_cut_its_answer_short(
    server: tuple[str, int],
) -> None:
    reader, writer = await asyncio.open_connection(*server)
    # The request, then the start of a next one that never ends (2 head timeouts long).
    writer.write(b"GET /stream HTTP/1.1\r\nhost: x\r\n\r\nGET /next HT")
    received, ended = await read_all(reader)
    writer.close()
    assert b"chunk9\n" in received and received.endswith(b"0\r\n\r\n")
    assert ended == "eof"  # and then the connection is closed: the next head came too slowly


async def test_bytes_between_requests_start_the_head_timeout(server: tuple[str, int]) -> None:
    reader, writer = await asyncio.open_connection(*server)
    writer.write(b"GET /stream HTTP/1.1\r\nhost: x\r\n\r\n")
    first = await reader.readuntil(b"0\r\n\r\n")
    assert b"chunk9" in first
    loop = asyncio.get_running_loop()
    started = loop.time()
    for _ in range(20):  # blank lines forever would otherwise hold the connection open
        writer.write(b"\r\n")
        await asyncio.sleep(0.1)
        if reader.at_eof() or writer.is_closing():
            break
    received, _ = await read_all(reader)
    writer.close()
    assert received == b""
    assert loop.time() - started < HEAD_TIMEOUT + 1.5


async def test_a_pipelined_oversized_head_does_not_break_into_the_answer_in_progress(
    server: tuple[str, int],
) -> None:
    reader, writer = await asyncio.open_connection(*server)
    writer.write(b"GET /stream HTTP/1.1\r\nhost: x\r\n\r\n")
    writer.write(b"GET /next HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 8192)
    received, ended = await read_all(reader)
    writer.close()
    # No 431 written into the middle of the stream: it ends whole, then the connection.
    assert received.endswith(b"chunk9\n\r\n0\r\n\r\n")
    assert b"HTTP/1.1 431" not in received
    assert ended == "eof"


async def test_the_abort_extension_resets_the_connection(server: tuple[str, int]) -> None:
    reader, writer = await asyncio.open_connection(*server)
    writer.write(b"GET /abort HTTP/1.1\r\nhost: x\r\n\r\n")
    received, ended = await read_all(reader)
    writer.close()
    assert b"chunk0" in received and b"chunk1" not in received
    assert ended == "reset"


def test_the_listening_socket_is_inheritable_by_workers() -> None:
    sock = bind("127.0.0.1", 0)
    try:
        assert sock.get_inheritable()
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR)
    finally:
        sock.close()


async def test_an_unparsable_request_gets_the_error_envelope(
    server: tuple[str, int], caplog: pytest.LogCaptureFixture
) -> None:
    reader, writer = await asyncio.open_connection(*server)
    writer.write(b"GET /x HTTP/1.1\r\nHost: a\r\nX-Bad: \x01value\r\n\r\n")
    with caplog.at_level(logging.WARNING, logger="fairgate.server"):
        received, ended = await read_all(reader)
    writer.close()
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ")
    assert b"content-type: application/json" in head
    # like every answer of the gateway, one a caller can quote: the log names it too
    [request_id] = [
        line.split(b": ", 1)[1].decode()
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"x-request-id: ")
    ]
    [logged] = [r.getMessage() for r in caplog.records if request_id in r.getMessage()]
    assert "127.0.0.1" in logged and "400 invalid_http" in logged
    assert orjson.loads(body) == {
        "error": {
            "message": "invalid HTTP request",
            "type": "invalid_request_error",
            "code": "invalid_http",
        }
    }
    assert ended == "eof"


async def echo(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers with the request line and body it read: which requests reached the app."""
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body += message.get("body", b"")
        if not message.get("more_body", False):
            break
    answer = b"%s %s %s" % (scope["method"].encode(), scope["path"].encode(), body)
    length = [(b"content-length", b"%d" % len(answer))]
    await send({"type": "http.response.start", "status": 200, "headers": length})
    await send({"type": "http.response.body", "body": answer})


@pytest.fixture
async def echoing() -> AsyncIterator[tuple[str, int]]:
    async with serving(echo) as address:
        yield address


SMUGGLED = b"POST /smuggled HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\ninner"


@pytest.mark.parametrize("apart", [False, True], ids=["one-write", "body-later"])
async def test_a_request_smuggled_in_an_upgrade_requests_body_is_never_served(
    echoing: tuple[str, int], apart: bool
) -> None:
    """httptools stops at an upgrade's head and hands the rest to "the new protocol";
    uvicorn, which upgrades to nothing here, used to parse that body as the next request.
    Behind a proxy that framed it as a body, that request (another key, another
    X-Forwarded-For) was served, and its answer went to the next client in line."""
    reader, writer = await asyncio.open_connection(*echoing)
    head = (
        b"POST /outer HTTP/1.1\r\nhost: x\r\nconnection: Upgrade\r\nupgrade: foo\r\n"
        b"content-length: %d\r\n\r\n" % len(SMUGGLED)
    )
    if apart:
        writer.write(head)
        await asyncio.sleep(0.2)
        writer.write(SMUGGLED)
    else:
        writer.write(head + SMUGGLED)
    received, ended = await read_all(reader)
    writer.close()
    assert received.count(b"HTTP/1.1 ") == 1, received
    head_in, _, body = received.partition(b"\r\n\r\n")
    assert head_in.startswith(b"HTTP/1.1 400 ")
    assert orjson.loads(body)["error"]["code"] == "upgrade_not_supported"
    assert b"smuggled" not in received and b"/outer" not in received
    assert ended == "eof"


async def test_an_upgrade_request_without_a_body_is_served_and_nothing_after_it_is_read(
    echoing: tuple[str, int],
) -> None:
    reader, writer = await asyncio.open_connection(*echoing)
    writer.write(
        b"GET /ws HTTP/1.1\r\nhost: x\r\nconnection: Upgrade\r\nupgrade: websocket\r\n\r\n"
        + SMUGGLED
    )
    received, ended = await read_all(reader)
    writer.close()
    assert received.count(b"HTTP/1.1 ") == 1, received
    assert received.startswith(b"HTTP/1.1 200 ")
    assert received.endswith(b"GET /ws ")
    assert ended == "eof"


@pytest.mark.parametrize(
    "chunk",
    [b"5\nhello\n0\n\n", b"ffffffffffffffffffff\r\nx\r\n", b"zz\r\nx\r\n"],
    ids=["bare-lf", "size-overflow", "size-not-hex"],
)
async def test_a_body_whose_framing_cannot_be_parsed_is_answered_400_at_once(
    echoing: tuple[str, int], chunk: bytes
) -> None:
    """Before, the app waited for the rest of the body until its own timeout (a minute
    in the gateway), holding the connection, and then answered for a slow body."""
    reader, writer = await asyncio.open_connection(*echoing)
    writer.write(b"POST /x HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n" + chunk)
    async with asyncio.timeout(5):
        received, ended = await read_all(reader)
    writer.close()
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), received
    assert orjson.loads(body)["error"]["code"] == "invalid_http"
    assert ended == "eof"


async def test_requests_without_an_upgrade_are_still_pipelined(echoing: tuple[str, int]) -> None:
    reader, writer = await asyncio.open_connection(*echoing)
    writer.write(b"POST /first HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\nab" + SMUGGLED)
    answers = b""
    async with asyncio.timeout(10):
        while answers.count(b"HTTP/1.1 200") < 2 or not answers.endswith(b"inner"):
            answers += await reader.read(65536)
    writer.close()
    assert b"POST /first ab" in answers and answers.endswith(b"POST /smuggled inner")


@pytest.fixture
async def capped() -> AsyncIterator[tuple[str, int]]:
    """A listener that holds one connection per network and three in all."""
    sock = bind("127.0.0.1", 0)
    stop = asyncio.Event()
    listener = Listener(
        "client",
        slow_stream,
        sock,
        HEAD_TIMEOUT * 20,
        4096,
        64 * 1024,
        10.0,
        caps=ConnectionCaps("client", total=3, per_network=1),
    )
    task = asyncio.create_task(serve([listener], grace=1.0, stop=stop))
    await asyncio.sleep(0.2)
    yield sock.getsockname()[:2]
    stop.set()
    await asyncio.wait_for(task, 10)
    sock.close()


async def test_a_connection_over_its_networks_cap_is_answered_503_unread(
    capped: tuple[str, int],
) -> None:
    held = await asyncio.open_connection(*capped, local_addr=("127.0.0.1", 0))
    reader, writer = await asyncio.open_connection(*capped, local_addr=("127.0.0.1", 0))
    # The request it sends (a large body on its way) is not read; the answer still arrives.
    writer.write(b"POST /x HTTP/1.1\r\nhost: x\r\ncontent-length: 100000\r\n\r\n" + b"a" * 50000)
    received, ended = await read_all(reader)
    writer.close()
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 ") and b"connection: close" in head
    assert orjson.loads(body)["error"]["code"] == "too_many_connections_from_network"
    assert ended == "eof"
    # Another network is served; and so is this one once its connection closes.
    other = await asyncio.open_connection(*capped, local_addr=("127.0.0.2", 0))
    other[1].write(b"GET /stream HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    assert b"chunk9" in (await read_all(other[0]))[0]
    other[1].close()
    held[1].close()
    await asyncio.sleep(0.2)
    again = await asyncio.open_connection(*capped, local_addr=("127.0.0.1", 0))
    again[1].write(b"GET /stream HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    assert b"chunk9" in (await read_all(again[0]))[0]
    again[1].close()


async def test_a_connection_over_the_listeners_cap_is_answered_503(
    capped: tuple[str, int],
) -> None:
    held = [
        await asyncio.open_connection(*capped, local_addr=(f"127.0.0.{n}", 0)) for n in (1, 2, 3)
    ]
    reader, writer = await asyncio.open_connection(*capped, local_addr=("127.0.0.4", 0))
    received, ended = await read_all(reader)
    writer.close()
    assert received.startswith(b"HTTP/1.1 503 ") and b'"too_many_connections"' in received
    assert ended == "eof"  # closed after the answer, not reset
    for _, held_writer in held:
        held_writer.close()
