"""What the simulator received: a bounded ring of the last N requests, for tests and debugging.

Kept raw (bytes) on the hot path and rendered only when ``GET /sim/requests``
asks: a body that is valid UTF-8 is returned as text, anything else as base64.
``/sim/*``, ``/metrics`` and ``/health`` are not recorded, so a scraper or a
health checker cannot push the requests that matter out of the ring.
"""

from __future__ import annotations

import base64
from collections import deque
from dataclasses import dataclass
from typing import Any

__all__ = ["RecordedRequest", "Recorder"]


@dataclass(slots=True)
class RecordedRequest:
    """One request as it arrived; ``priority`` is filled in once the engine decided it."""

    method: str
    path: str
    query: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes
    received_at: float
    priority: int | None = None

    def to_json(self) -> dict[str, Any]:
        try:
            body, encoding = self.body.decode("utf-8"), "text"
        except UnicodeDecodeError:
            body, encoding = base64.b64encode(self.body).decode("ascii"), "base64"
        return {
            "method": self.method,
            "path": self.path,
            "query": self.query.decode("latin-1"),
            "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in self.headers],
            "body": body,
            "body_encoding": encoding,
            "received_at": self.received_at,
            "priority": self.priority,
        }


class Recorder:
    """The last ``size`` requests, oldest first; ``size == 0`` records nothing."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._ring: deque[RecordedRequest] = deque(maxlen=max(size, 1))

    def add(self, entry: RecordedRequest) -> None:
        if self.size:
            self._ring.append(entry)

    def entries(self, path: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """Recorded requests, newest last, optionally only ``path`` and only the last ``limit``."""
        chosen = [e for e in self._ring if path is None or e.path == path]
        if limit is not None:
            chosen = chosen[-limit:] if limit else []
        return [e.to_json() for e in chosen]

    def clear(self) -> None:
        self._ring.clear()
