"""The ASGI interface's types as the gateway's own request path uses them.

The client listener runs no framework: the pipeline takes the server's scope
and its two channels directly. A message is the plain dict the ASGI
specification describes (``{"type": "http.response.start", ...}``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

__all__ = ["Message", "Receive", "Scope", "Send"]

Scope: TypeAlias = dict[str, Any]
Message: TypeAlias = dict[str, Any]
Receive: TypeAlias = Callable[[], Awaitable[Message]]
Send: TypeAlias = Callable[[Message], Awaitable[None]]
