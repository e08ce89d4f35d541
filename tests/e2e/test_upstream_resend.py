"""A POST the engine read whole is never sent to it again, whatever happens to the connection.

A raw engine on a thread of its own answers the first chat completion and every GET
(health, metrics); every later POST it reads in full and then closes the connection
without answering — as an engine that crashed mid-generation would. The gateway's
second request reaches it on the reused keep-alive connection. Resending it would run
the generation twice; the client must get a 502 envelope, and the engine must have seen
each request once.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import httpx
import orjson
import pytest
from tests.e2e.conftest import AUTH, StartGateway
from tests.e2e.raw_client import check_error

pytestmark = pytest.mark.slow

CHAT = "/v1/chat/completions"
ANSWER = orjson.dumps(
    {
        "id": "c1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
)


class CrashingEngine:
    """Counts the POSTs that arrived whole; answers only the first."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.posts = 0
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # stopped
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(30)
            buffer = b""
            while True:
                request, buffer = _read_request(conn, buffer)
                if request is None:
                    return
                if not request.startswith(b"POST"):
                    _answer(conn, b"text/plain", b"")
                    continue
                with self._lock:
                    self.posts += 1
                    first = self.posts == 1
                if not first:
                    return  # read whole, never answered: the connection closes
                _answer(conn, b"application/json", ANSWER)

    def stop(self) -> None:
        self.listener.close()


def _read_request(conn: socket.socket, buffer: bytes) -> tuple[bytes | None, bytes]:
    """One whole request (head and body) from ``conn``, and what followed it."""
    while b"\r\n\r\n" not in buffer:
        data = conn.recv(65536)
        if not data:
            return None, b""
        buffer += data
    head, _, rest = buffer.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        data = conn.recv(65536)
        if not data:
            return None, b""
        rest += data
    return head + rest[:length], rest[length:]


def _answer(conn: socket.socket, content_type: bytes, body: bytes) -> None:
    conn.sendall(
        b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s"
        % (content_type, len(body), body)
    )


@pytest.fixture
def engine() -> Iterator[CrashingEngine]:
    engine = CrashingEngine()
    yield engine
    engine.stop()


def _wait_ready(admin_url: str) -> None:
    deadline = time.monotonic() + 20
    while httpx.get(admin_url + "/readyz").status_code != 200:
        assert time.monotonic() < deadline, "the engine never became healthy"
        time.sleep(0.1)


def test_a_request_the_engine_read_whole_is_not_sent_again_and_the_client_gets_a_502(
    start_gateway: StartGateway, engine: CrashingEngine
) -> None:
    upstream = {"name": "r0", "url": f"http://127.0.0.1:{engine.port}"}
    gw = start_gateway([{"name": "m", "engine": "vllm", "upstreams": [upstream]}])
    _wait_ready(gw.admin_url)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    with httpx.Client(base_url=gw.url, headers=AUTH, timeout=30) as client:
        assert client.post(CHAT, json=body).status_code == 200
        second = client.post(CHAT, json=body)
    check_error(second.status_code, second.headers.get("x-request-id"), second.content, 502)
    assert engine.posts == 2  # each request reached the engine once
