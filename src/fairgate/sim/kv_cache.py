"""A paged KV cache with prefix caching, modelled on vLLM v1's block pool.

A sequence's tokens live in fixed-size blocks. Each *full* block is named by a
hash that chains from the block before it, and the chain starts from a root that
mixes in the request's ``cache_salt`` (and the model), so two requests share a
cached block only if every token before it, the salt and the model agree:

    root = H(salt, model)
    h0   = H(root, tokens[0:B])
    hi   = H(h(i-1), tokens[i*B:(i+1)*B])

Freed blocks keep their hash and go to the back of a free queue; allocation
takes from the front, evicting the hash only then (least recently freed first).
A sequence frees its blocks tail first, so the end of a prompt is evicted before
its beginning, which other requests are likelier to share.
"""

from __future__ import annotations

import hashlib
import struct
from collections import OrderedDict
from collections.abc import Sequence

__all__ = ["KVCache", "chain_hashes", "root_hash"]


def root_hash(salt: str | None, model: str) -> bytes:
    """The parent of a sequence's first block: salt and model, length-prefixed."""
    salt_bytes = (salt or "").encode()
    model_bytes = model.encode()
    packed = struct.pack("<II", len(salt_bytes), len(model_bytes)) + salt_bytes + model_bytes
    return hashlib.sha256(b"fairgate-sim-kv\x00" + packed).digest()


def chain_hashes(
    tokens: Sequence[int], block_size: int, root: bytes, hashes: list[bytes]
) -> list[bytes]:
    """Extend the chain ``hashes`` with every full block of ``tokens``.

    ``tokens`` starts where the chain stops: at position ``len(hashes) * block_size``
    of the sequence. A trailing partial block is left for a later call.
    """
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = hashes[-1] if hashes else root
        block = struct.pack(f"<{block_size}I", *tokens[start : start + block_size])
        hashes.append(hashlib.sha256(parent + block).digest())
    return hashes


class KVCache:
    """``num_blocks`` blocks of ``block_size`` tokens, shared by reference count.

    Contract: a block is either referenced (``ref > 0``, in use by that many
    sequences) or in the free queue; ``usage`` is ``1 - free/num_blocks`` in 0..1,
    so evictable cached blocks count as free, as vLLM reports them. ``allocate``
    and ``allocate_one`` never over-commit: callers check ``can_allocate`` or get
    ``None``. With ``prefix_caching=False`` nothing is ever registered or hit.
    """

    def __init__(self, num_blocks: int, block_size: int, *, prefix_caching: bool = True) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError("num_blocks and block_size must be >= 1")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self._ref = [0] * num_blocks
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self._hash_of: dict[int, bytes] = {}
        self._block_of: dict[bytes, int] = {}

    @property
    def free_blocks(self) -> int:
        return len(self._free)

    @property
    def used_blocks(self) -> int:
        return self.num_blocks - len(self._free)

    @property
    def usage(self) -> float:
        return self.used_blocks / self.num_blocks

    @property
    def cached_blocks(self) -> int:
        """Blocks that currently carry a prefix hash (in use or evictable)."""
        return len(self._hash_of)

    def cached_prefix(self, hashes: Sequence[bytes]) -> list[int]:
        """Blocks holding the longest cached prefix of the chain ``hashes``."""
        if not self.prefix_caching:
            return []
        hit: list[int] = []
        for h in hashes:
            block = self._block_of.get(h)
            if block is None:
                break
            hit.append(block)
        return hit

    def can_allocate(self, hit: Sequence[int], new: int) -> bool:
        """Whether ``hit`` can be taken and ``new`` fresh blocks found besides."""
        evictable_hits = sum(1 for b in hit if self._ref[b] == 0)
        return len(self._free) - evictable_hits >= new

    def allocate(self, hit: Sequence[int], new: int) -> list[int]:
        """Take the hit blocks and ``new`` fresh ones; returns them in sequence order."""
        if not self.can_allocate(hit, new):
            raise RuntimeError("KV cache over-committed")
        for block in hit:
            if self._ref[block] == 0:
                del self._free[block]
            self._ref[block] += 1
        fresh = [self._take() for _ in range(new)]
        return [*hit, *fresh]

    def allocate_one(self) -> int | None:
        """One fresh block, or ``None`` when every block is in use."""
        return self._take() if self._free else None

    def register(self, block: int, block_hash: bytes) -> None:
        """Name a full block by its hash so later requests can share it."""
        if not self.prefix_caching or block in self._hash_of or block_hash in self._block_of:
            return
        self._hash_of[block] = block_hash
        self._block_of[block_hash] = block

    def free(self, blocks: Sequence[int]) -> None:
        """Drop one reference to each block; unreferenced ones join the free queue."""
        for block in reversed(blocks):
            self._ref[block] -= 1
            if self._ref[block] == 0:
                self._free[block] = None

    def reset_prefix_cache(self) -> None:
        """Forget every hash: nothing cached so far can be hit again."""
        self._hash_of.clear()
        self._block_of.clear()

    def _take(self) -> int:
        block, _ = self._free.popitem(last=False)
        old = self._hash_of.pop(block, None)
        if old is not None:
            del self._block_of[old]
        self._ref[block] = 1
        return block
