"""Block hashing with the salt, the free queue's LRU eviction, and prefix hits across requests."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from fairgate.sim.kv_cache import KVCache, chain_hashes, root_hash
from fairgate.sim.process import SimProcess


def _chain(tokens: list[int], salt: str | None, model: str = "m", block: int = 4) -> list[bytes]:
    return chain_hashes(tokens, block, root_hash(salt, model), [])


def test_only_full_blocks_are_hashed_and_the_chain_extends() -> None:
    tokens = list(range(10))
    hashes = _chain(tokens, None)
    assert len(hashes) == 2
    extended = chain_hashes(list(range(8, 12)), 4, root_hash(None, "m"), list(hashes))
    assert extended[:2] == hashes and len(extended) == 3
    assert extended == _chain(list(range(12)), None)


def test_the_salt_changes_the_first_hash_and_every_later_one() -> None:
    tokens = list(range(16))
    plain, salted, other = _chain(tokens, None), _chain(tokens, "a"), _chain(tokens, "b")
    for i in range(4):
        assert len({plain[i], salted[i], other[i]}) == 3
    assert _chain(tokens, "a") == salted
    assert _chain(tokens, "a", model="n") != salted


def test_a_differing_block_changes_the_rest_of_the_chain() -> None:
    a = _chain([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], None)
    b = _chain([1, 2, 3, 4, 0, 6, 7, 8, 9, 10, 11, 12], None)
    assert a[0] == b[0] and a[1] != b[1] and a[2] != b[2]


def test_freed_blocks_keep_their_hash_until_reused() -> None:
    kv = KVCache(4, 4)
    hashes = _chain(list(range(8)), None)
    blocks = kv.allocate([], 2)
    for block, h in zip(blocks, hashes, strict=True):
        kv.register(block, h)
    kv.free(blocks)
    assert kv.used_blocks == 0 and kv.usage == 0.0
    assert kv.cached_prefix(hashes) == blocks
    # taking the hit blocks back counts them as in use again
    assert kv.can_allocate(blocks, 2) and not kv.can_allocate(blocks, 3)
    again = kv.allocate(blocks, 0)
    assert again == blocks and kv.used_blocks == 2


def test_eviction_takes_the_least_recently_freed_and_the_tail_first() -> None:
    kv = KVCache(4, 4)
    hashes = _chain(list(range(8)), None)
    blocks = kv.allocate([], 2)
    for block, h in zip(blocks, hashes, strict=True):
        kv.register(block, h)
    kv.free(blocks)  # the tail block is queued before the head block
    kv.allocate([], 3)  # two never-used blocks, then the cached tail
    assert kv.cached_prefix(hashes) == blocks[:1]
    kv.allocate([], 1)
    assert kv.cached_prefix(hashes) == []
    assert kv.allocate_one() is None


def test_shared_blocks_are_counted_once() -> None:
    kv = KVCache(4, 4)
    (block,) = kv.allocate([], 1)
    kv.register(block, b"h" * 32)
    kv.allocate([block], 0)
    assert kv.used_blocks == 1
    kv.free([block])
    assert kv.used_blocks == 1
    kv.free([block])
    assert kv.used_blocks == 0


def test_without_prefix_caching_nothing_is_hit() -> None:
    kv = KVCache(4, 4, prefix_caching=False)
    (block,) = kv.allocate([], 1)
    kv.register(block, b"h" * 32)
    assert kv.cached_prefix([b"h" * 32]) == []


def test_reset_forgets_every_hash() -> None:
    kv = KVCache(4, 4)
    (block,) = kv.allocate([], 1)
    kv.register(block, b"h" * 32)
    kv.reset_prefix_cache()
    assert kv.cached_prefix([b"h" * 32]) == [] and kv.cached_blocks == 0


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with SimProcess("--block-size", "4", "--speed", "200", "--ttft", "0") as process:
        yield process


@pytest.mark.slow
def test_prefix_cache_hits_only_within_the_same_salt(sim: SimProcess) -> None:
    client = openai.OpenAI(base_url=sim.url + "/v1", api_key="x", max_retries=0, timeout=30)
    prompt = "one two three four five six seven eight nine ten " * 2  # 20 tokens, 5 blocks

    def cached(salt: str | None) -> int:
        extra = {"cache_salt": salt} if salt is not None else None
        reply = client.completions.create(
            model="sim-model", prompt=prompt, max_tokens=1, extra_body=extra
        )
        assert reply.usage is not None and reply.usage.prompt_tokens_details is not None
        return reply.usage.prompt_tokens_details.cached_tokens or 0

    assert cached("tenant-a") == 0
    # 20 tokens: the last one is always computed, so 4 full blocks (16 tokens) are hit
    assert cached("tenant-a") == 16
    assert cached("tenant-b") == 0
    assert cached(None) == 0
    assert cached("tenant-a") == 16
    assert cached("tenant-b") == 16
    stats = sim.stats()
    assert stats["prefix_cache_hits"] == 3 and stats["prefix_cache_hit_tokens"] == 48
    sim.reset()
    assert cached("tenant-a") == 0
    client.close()
