"""The head of a request to an engine, as bytes: exactly the caller's headers plus framing.

Nothing is added beyond ``host`` (when the caller gave none) and ``content-length``: no
``user-agent``, ``accept``, ``accept-encoding`` or ``connection``. Whatever would let a
header smuggle another one (a CR, LF or NUL in a value, a name that is not a token) is
refused before a byte is written.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["RequestHeadEncoder"]

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TARGET = re.compile(rb"[\x21-\x7e]+")
_PLAIN, _HOST, _CONNECTION = 0, 1, 2


class RequestHeadEncoder:
    """Builds request heads, remembering which header names and methods it has checked.

    The memory is bounded (``max_names`` entries, then names are checked on every use):
    the gateway sends a small fixed set of names, and checking a name costs more than the
    rest of the head together.
    """

    __slots__ = ("_max_names", "_methods", "_names")

    def __init__(self, max_names: int = 1024) -> None:
        self._max_names = max_names
        self._names: dict[bytes, int] = {}
        self._methods: dict[str, bytes] = {}

    def encode(
        self,
        method: str,
        target: bytes,
        headers: Sequence[tuple[bytes, bytes]],
        host: bytes,
        length: int,
    ) -> tuple[bytes, bool]:
        """The head: request line, ``headers`` as given, ``host`` as the Host header if the
        list has none, ``content-length: length`` (left out for a GET or HEAD without a
        body), and the blank line. Also whether it asks for ``connection: close``.

        Raises ``ValueError`` for a method or header name that is not an HTTP token, a
        target with spaces or control characters, a value with CR, LF or NUL, and for
        ``content-length`` or ``transfer-encoding`` among ``headers`` (the framing is the
        client's). Messages never quote a header value.
        """
        verb = self._methods.get(method) or self._method(method)
        if _TARGET.fullmatch(target) is None:
            raise ValueError("the request target is not valid HTTP")
        names = self._names
        has_host = close = False
        for name, value in headers:
            kind = names.get(name)
            if kind is None:
                kind = self._name(name)
            if kind == _HOST:
                has_host = True
            elif kind == _CONNECTION:
                close = b"close" in value.lower()
        lines = [verb + b" " + target + b" HTTP/1.1"]
        lines += [b": ".join(header) for header in headers]
        if not has_host:
            lines.append(b"host: " + host)
        if length or verb not in (b"GET", b"HEAD"):
            lines.append(b"content-length: %d" % length)
        lines.append(b"\r\n")
        head = b"\r\n".join(lines)
        # One CRLF per line; a CR, LF or NUL in a value (or in host) would add a header.
        count = len(lines)
        if head.count(b"\n") != count or head.count(b"\r") != count or b"\0" in head:
            raise ValueError("a header value holds CR, LF or NUL")
        return head, close

    def _method(self, method: str) -> bytes:
        verb = method.encode("ascii", "replace")
        if _TOKEN.fullmatch(verb) is None:
            raise ValueError("the request method is not an HTTP token")
        if len(self._methods) < self._max_names:
            self._methods[method] = verb
        return verb

    def _name(self, name: bytes) -> int:
        if _TOKEN.fullmatch(name) is None:
            raise ValueError("a header name is not an HTTP token")
        lower = name.lower()
        if lower == b"content-length" or lower == b"transfer-encoding":
            raise ValueError("content-length and transfer-encoding are set by the client")
        kind = _HOST if lower == b"host" else _CONNECTION if lower == b"connection" else _PLAIN
        if len(self._names) < self._max_names:
            self._names[name] = kind
        return kind
