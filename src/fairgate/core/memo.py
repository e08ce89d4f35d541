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

A memo given ``work`` works a missing value out by itself: ``value`` is the dict's own
``__getitem__``, so a read that finds its value is one C call, and ``map(memo.value,
keys)`` reads many without a Python call each (the Redis command packer reads ~90
words a script call so):

    bulks = BoundedMemo[str, str](4096, work=encode)
    text = "".join(map(bulks.value, words))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["BoundedMemo"]

K = TypeVar("K")
V = TypeVar("V")


class _Entries(dict[K, V]):
    """The memo's dict: a missing key is worked out and kept (``BoundedMemo.value``)."""

    __slots__ = ("_memo",)

    def __init__(self, memo: BoundedMemo[K, V]) -> None:
        super().__init__()
        self._memo = memo

    def __missing__(self, key: K) -> V:
        memo = self._memo
        assert memo._work is not None
        return memo.keep(key, memo._work(key))


class BoundedMemo(Generic[K, V]):
    """At most ``size`` (≥ 1) values by key; ``keep`` empties the memo first when full.
    ``keeps(key)`` false: the value is handed back, not held (None: every key is held).
    ``work(key)``: the value of a key not held, for ``value``."""

    __slots__ = ("_entries", "_keeps", "_size", "_work", "get", "value")

    def __init__(
        self,
        size: int,
        keeps: Callable[[K], bool] | None = None,
        work: Callable[[K], V] | None = None,
    ) -> None:
        if size < 1:
            raise ValueError(f"a memo holds at least 1 value, not {size}")
        self._size = size
        self._keeps = keeps
        self._work = work
        self._entries: dict[K, V] = _Entries(self) if work is not None else {}
        self.get: Callable[[K], V | None] = self._entries.get
        """The value kept for a key, or None."""
        self.value: Callable[[K], V] = self._entries.__getitem__
        """The value of a key: the one kept, else ``work(key)`` (kept as ``keep`` would);
        a memo without ``work`` raises ``KeyError`` for a key not held."""

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
