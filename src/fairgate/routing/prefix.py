"""Prompt prefixes as chained block hashes, and which replica saw which prefix recently.

    hᵢ = CRC-32(salt ‖ block₀ ‖ … ‖ blockᵢ)        (a running CRC, one block at a time)

A block is a run of bytes of the prompt's UTF-8 encoding, or of token ids.

Only whole blocks are hashed, as an engine caches only whole KV blocks. Each
hash covers everything before it, so two prompts share ``hᵢ`` exactly when
they share their first ``i + 1`` blocks (up to a CRC collision), and a match
can be counted block by block from the start. The salt keeps tenants apart
the way the engine's ``cache_salt`` does: prompts under different salts never
match. CRC-32 is zlib's, the same in every process and version, so every
gateway replica computes the same hashes; it costs about a third of a
microsecond per 256-byte block where a cryptographic hash costs three
times that. A collision (about one lookup in a million with full indexes)
only makes one routing choice less informed: the engine's own cache is keyed
by its own hashes, and the salt is the tenant boundary.

A :class:`PrefixIndex` is routing state the caller owns (one per model): after
a request is sent to a replica the caller records its hashes there; the
prefix-affinity scorer only reads it.
"""

from __future__ import annotations

import struct
import zlib
from collections import OrderedDict
from collections.abc import Sequence

__all__ = ["PrefixIndex", "prefix_hashes"]


def prefix_hashes(
    prompt: str | bytes | Sequence[int],
    block_size: int = 256,
    max_blocks: int = 16,
    *,
    salt: bytes = b"",
) -> tuple[int, ...]:
    """Chained hashes of the first ``max_blocks`` whole blocks of ``prompt``.

    A block is ``block_size`` bytes of a string's UTF-8 encoding (characters,
    for ASCII text) or of a bytes value, or ``block_size`` token ids. UTF-8
    is prefix-free, so two strings share their first blocks exactly when
    they share the text those bytes encode. Cost: O(block_size × max_blocks),
    one C call per block. Raises ``ValueError`` for a non-positive block size
    or a negative limit.
    """
    if block_size <= 0 or max_blocks < 0:
        raise ValueError("block_size must be positive and max_blocks not negative")
    limit = block_size * max_blocks
    head = prompt[:limit]  # a character is at least one byte: enough to encode `limit`
    if 4 * len(head) < block_size:
        return ()  # not one whole block, whatever it is (UTF-8 takes at most 4 bytes a character)
    if isinstance(head, str):
        data, step = head.encode("utf-8", "surrogatepass")[:limit], block_size
    elif isinstance(head, bytes):
        data, step = head, block_size
    else:
        data, step = struct.pack(f"<{len(head)}q", *head), block_size * 8
    crc32 = zlib.crc32
    running = crc32(salt)
    hashes: list[int] = []
    for start in range(0, len(data) - step + 1, step):
        running = crc32(data[start : start + step], running)
        hashes.append(running)
    return tuple(hashes)


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
