"""Prompt prefixes as chained block hashes, and which replica saw which prefix recently.

    h₀ = H(salt ‖ block₀),   hᵢ = H(hᵢ₋₁ ‖ blockᵢ)

Only whole blocks are hashed, as an engine caches only whole KV blocks. Because
each hash chains from the one before, two prompts share ``hᵢ`` exactly when
they share their first ``i + 1`` blocks, and a match can be counted block by
block from the start. The salt keeps tenants apart the way the engine's
``cache_salt`` does: prompts under different salts never match. H is BLAKE2b
(64 bits), stable across processes, so every gateway replica computes the same
hashes.

A :class:`PrefixIndex` is routing state the caller owns (one per model): after
a request is sent to a replica the caller records its hashes there; the
prefix-affinity scorer only reads it.
"""

from __future__ import annotations

import hashlib
import struct
from collections import OrderedDict
from collections.abc import Sequence

__all__ = ["PrefixIndex", "prefix_hashes"]


def prefix_hashes(
    prompt: str | bytes | Sequence[int],
    block_chars: int = 256,
    max_blocks: int = 16,
    *,
    salt: bytes = b"",
) -> tuple[int, ...]:
    """Chained hashes of the first ``max_blocks`` whole blocks of ``prompt``.

    A block is ``block_chars`` characters of a string, bytes of a bytes value,
    or token ids of a sequence of ints. Cost: O(block_chars × max_blocks).
    Raises ``ValueError`` for a non-positive block size or a negative limit.
    """
    if block_chars <= 0 or max_blocks < 0:
        raise ValueError("block_chars must be positive and max_blocks not negative")
    whole = min(len(prompt) // block_chars, max_blocks)
    digest = hashlib.blake2b(salt, digest_size=8).digest()
    hashes: list[int] = []
    for i in range(whole):
        block = prompt[i * block_chars : (i + 1) * block_chars]
        digest = hashlib.blake2b(digest + _encode(block), digest_size=8).digest()
        hashes.append(int.from_bytes(digest, "big"))
    return tuple(hashes)


def _encode(block: str | bytes | Sequence[int]) -> bytes:
    if isinstance(block, str):
        return block.encode("utf-8", "surrogatepass")
    if isinstance(block, bytes):
        return block
    return struct.pack(f"<{len(block)}q", *block)


class PrefixIndex:
    """Which prefix blocks each replica served recently: a bounded LRU per replica.

    At most ``blocks_per_replica`` hashes are kept per replica (the oldest go
    first, the deepest blocks of a prompt before its first ones, as an engine
    evicts a prefix from its tail). Memory is O(replicas × blocks_per_replica);
    :meth:`forget` a replica that left. Not thread-safe: one owner.
    """

    def __init__(self, blocks_per_replica: int = 4096) -> None:
        if blocks_per_replica <= 0:
            raise ValueError("blocks_per_replica must be positive")
        self.blocks_per_replica = blocks_per_replica
        self._seen: dict[str, OrderedDict[int, None]] = {}

    def record(self, replica: str, hashes: Sequence[int]) -> None:
        """Remember that ``replica`` now holds these prefix blocks."""
        seen = self._seen.setdefault(replica, OrderedDict())
        # Deepest first, so the first block is the most recently used one.
        for h in reversed(hashes):
            seen[h] = None
            seen.move_to_end(h)
        while len(seen) > self.blocks_per_replica:
            seen.popitem(last=False)

    def matched(self, replica: str, hashes: Sequence[int]) -> int:
        """How many leading blocks of ``hashes`` ``replica`` holds. O(len(hashes))."""
        seen = self._seen.get(replica)
        if not seen:
            return 0
        count = 0
        for h in hashes:
            if h not in seen:
                break
            count += 1
        return count

    def forget(self, replica: str) -> None:
        self._seen.pop(replica, None)

    def __len__(self) -> int:
        return sum(len(seen) for seen in self._seen.values())
