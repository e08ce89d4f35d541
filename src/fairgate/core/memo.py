"""A bounded memo: values worked out once per key, at most ``size`` of them.

The request path remembers a few answers that clients repeat (the endpoint of a path,
the terms of a principal's request, the tags a header adds), so that a request pays one
dict read, not the work. Their keys come from clients, so each memo is bounded: once
``size`` are held, keeping one more forgets them all first. Clearing instead of
evicting one costs nothing per read (no recency to track), and a working set within
the bound is kept again after one miss each:

    paths = BoundedMemo[bytes, str](1024, keeps=lambda path: len(path) <= 2048)
    endpoint = paths.get(raw)                 # None: not worked out yet
    if endpoint is None:
        endpoint = paths.keep(raw, resolve(raw))  # kept unless ``keeps`` says no

``get`` is the dict's own method (one call a read, as a dict held by hand costs);
``keeps(key)`` says which keys are worth holding (a long client value is worked out
each time instead). A value that was never worked out (a refusal, raised) is never
handed to ``keep``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["BoundedMemo"]

K = TypeVar("K")
V = TypeVar("V")


class BoundedMemo(Generic[K, V]):
    """At most ``size`` (≥ 1) values by key; ``keep`` empties the memo first when full.
    ``keeps(key)`` false: the value is handed back, not held (None: every key is held)."""

    __slots__ = ("_entries", "_keeps", "_size", "get")

    def __init__(self, size: int, keeps: Callable[[K], bool] | None = None) -> None:
        if size < 1:
            raise ValueError(f"a memo holds at least 1 value, not {size}")
        self._size = size
        self._keeps = keeps
        self._entries: dict[K, V] = {}
        self.get: Callable[[K], V | None] = self._entries.get
        """The value kept for a key, or None."""

    def __len__(self) -> int:
        return len(self._entries)

    def keep(self, key: K, value: V) -> V:
        """Hold ``value`` for ``key`` (unless ``keeps`` refuses the key) and hand it back."""
        if self._keeps is None or self._keeps(key):
            entries = self._entries
            if len(entries) >= self._size and key not in entries:
                entries.clear()
            entries[key] = value
        return value

    def clear(self) -> None:
        """Forget every value (what they were worked out from has changed)."""
        self._entries.clear()
