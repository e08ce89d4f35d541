"""Requests written byte for byte, and checks of the gateway's error envelope.

An HTTP client library normalises what the header tests must control (header
case, duplicates, hop-by-hop headers), so these requests are written by hand
on a socket to 127.0.0.1 and their answers parsed here.
"""

from __future__ import annotations

import socket
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from tests.e2e.conftest import TEST_KEY


@dataclass(frozen=True, slots=True)
class RawAnswer:
    """A parsed HTTP/1.1 answer; ``body`` is de-chunked."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        """The first header called ``name`` (any case), or None."""
        wanted = name.lower()
        return next((value for key, value in self.headers if key.lower() == wanted), None)


def request_bytes(
    method: str,
    path: str,
    *,
    headers: Sequence[tuple[str, str]] = (),
    body: bytes = b"",
    key: str | None = TEST_KEY,
) -> bytes:
    """An HTTP/1.1 request with exactly these headers, plus Host, Content-Length and the
    test key's Authorization if absent (``key=None``: no Authorization)."""
    names = {name.lower() for name, _ in headers}
    lines = [f"{method} {path} HTTP/1.1"]
    if "host" not in names:
        lines.append("Host: gateway")
    if key is not None and "authorization" not in names:
        lines.append(f"Authorization: Bearer {key}")
    lines.extend(f"{name}: {value}" for name, value in headers)
    if body and "content-length" not in names and "transfer-encoding" not in names:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def raw_request(url: str, request: bytes, timeout: float = 30.0) -> RawAnswer:
    """Send ``request`` to the host and port of ``url`` and read one whole answer."""
    parts = urllib.parse.urlsplit(url)
    with socket.create_connection(
        (parts.hostname or "127.0.0.1", parts.port or 80), timeout=timeout
    ) as sock:
        sock.sendall(request)
        reader = _Reader(sock)
        status_line = reader.line()
        status = int(status_line.split(b" ", 2)[1])
        headers: list[tuple[str, str]] = []
        while line := reader.line():
            name, _, value = line.decode("latin-1").partition(":")
            headers.append((name.strip(), value.strip()))
        answer = RawAnswer(status, headers, b"")
        length = answer.header("content-length")
        if (answer.header("transfer-encoding") or "").lower() == "chunked":
            body = reader.chunked()
        elif length is not None:
            body = reader.exactly(int(length))
        else:
            body = reader.rest()
        return RawAnswer(status, headers, body)


def check_error(
    status: int, request_id: str | None, content: bytes, expected: int, code: str | None = None
) -> dict[str, Any]:
    """Assert an OpenAI error envelope with ``expected`` status (and ``code``); return its error."""
    assert status == expected, (status, content)
    assert request_id, "every gateway answer carries x-request-id"
    document = orjson.loads(content)
    assert set(document) == {"error"}, document
    error: dict[str, Any] = document["error"]
    assert isinstance(error.get("message"), str) and error["message"], error
    assert isinstance(error.get("type"), str) and error["type"], error
    assert "code" in error, error
    if code is not None:
        assert error["code"] == code, error
    return error


class _Reader:
    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = b""

    def _fill(self) -> bool:
        chunk = self._sock.recv(65536)
        self._buffer += chunk
        return bool(chunk)

    def line(self) -> bytes:
        while b"\r\n" not in self._buffer:
            if not self._fill():
                raise ConnectionError("connection closed in the middle of a line")
        line, _, self._buffer = self._buffer.partition(b"\r\n")
        return line

    def exactly(self, size: int) -> bytes:
        while len(self._buffer) < size:
            if not self._fill():
                raise ConnectionError("connection closed before the whole body")
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data

    def chunked(self) -> bytes:
        body = b""
        while size := int(self.line().split(b";")[0], 16):
            body += self.exactly(size)
            self.line()
        while self.line():  # trailers, then the blank line
            pass
        return body

    def rest(self) -> bytes:
        while self._fill():
            pass
        data, self._buffer = self._buffer, b""
        return data
