"""The ASGI interface's types as the gateway's own request path uses them.

The client listener runs no framework: the pipeline takes the server's scope
and its two channels directly. A message is the plain dict the ASGI
specification describes (``{"type": "http.response.start", ...}``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

__all__ = ["ASGIApp", "Message", "Mount", "Receive", "Scope", "Send"]

Scope: TypeAlias = dict[str, Any]
Message: TypeAlias = dict[str, Any]
Receive: TypeAlias = Callable[[], Awaitable[Message]]
Send: TypeAlias = Callable[[Message], Awaitable[None]]
ASGIApp: TypeAlias = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Mount:
    """An application that answers a fixed set of paths of a listener in front of another:
    the paths in ``exact`` and every path starting with one of ``prefixes``."""

    app: ASGIApp
    exact: frozenset[str]
    prefixes: tuple[str, ...]

    def owns(self, path: str) -> bool:
        """Whether ``path`` (the scope's decoded path) is this application's."""
        return path in self.exact or path.startswith(self.prefixes)
