"""prefix_hashes chains block hashes; PrefixIndex remembers them per replica, bounded."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairgate.routing.prefix import PrefixIndex, prefix_hashes


def test_only_whole_blocks_up_to_the_limit_are_hashed() -> None:
    assert prefix_hashes("x" * 99, block_size=100) == ()
    assert len(prefix_hashes("x" * 250, block_size=100)) == 2
    assert len(prefix_hashes("x" * 10_000, block_size=100, max_blocks=5)) == 5


def test_shared_leading_blocks_share_hashes_and_nothing_after() -> None:
    one = prefix_hashes("A" * 200 + "B" * 100 + "C" * 100, 100)
    two = prefix_hashes("A" * 200 + "X" * 100 + "C" * 100, 100)
    assert one[:2] == two[:2]
    assert one[2] != two[2]
    assert one[3] != two[3]  # the same fourth block after a different third one


def test_a_salt_separates_tenants() -> None:
    prompt = "system prompt " * 40
    assert (
        prefix_hashes(prompt, 64, salt=b"org-a")[0] != prefix_hashes(prompt, 64, salt=b"org-b")[0]
    )


def test_tokens_bytes_and_text_are_accepted_and_stable() -> None:
    assert len(prefix_hashes(list(range(64)), 16)) == 4
    assert prefix_hashes(b"a" * 32, 16) == prefix_hashes("a" * 32, 16)
    # Stable across processes and versions: zlib's CRC-32, never hash().
    assert prefix_hashes("abcd", 2) == (2659403885, 3984772369)
    assert prefix_hashes([1, 2, 3, 4], 2) == prefix_hashes(
        bytes(b"".join(n.to_bytes(8, "little") for n in (1, 2, 3, 4))), 16
    )


def test_invalid_sizes_are_refused() -> None:
    with pytest.raises(ValueError):
        prefix_hashes("abc", 0)
    with pytest.raises(ValueError):
        PrefixIndex(0)


def test_text_blocks_are_bytes_of_its_utf8() -> None:
    assert len(prefix_hashes("é" * 100, 100)) == 2  # 200 bytes
    assert prefix_hashes("é" * 100, 100) == prefix_hashes(("é" * 100).encode(), 100)
    assert len(prefix_hashes("é" * 10_000, 100, max_blocks=3)) == 3


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40), st.text(max_size=40), st.integers(1, 8))
def test_hashes_agree_exactly_as_far_as_the_blocks_do(a: str, b: str, block: int) -> None:
    ha, hb = prefix_hashes(a, block, 100), prefix_hashes(b, block, 100)
    ea, eb = a.encode("utf-8", "surrogatepass"), b.encode("utf-8", "surrogatepass")
    assert len(ha) == min(len(ea) // block, 100)
    for i in range(min(len(ha), len(hb))):
        assert (ha[i] == hb[i]) == (ea[: (i + 1) * block] == eb[: (i + 1) * block])


def test_the_index_counts_leading_blocks_per_replica() -> None:
    index = PrefixIndex()
    hashes = prefix_hashes("p" * 400, 100)
    index.record("gpu1", hashes[:3])
    assert index.matched("gpu1", hashes) == 3
    assert index.matched("gpu2", hashes) == 0
    assert index.matched("gpu1", (12345, *hashes)) == 0  # matches count from the start
    index.forget("gpu1")
    assert index.matched("gpu1", hashes) == 0


def test_the_index_is_bounded_and_evicts_deep_blocks_first() -> None:
    index = PrefixIndex(blocks_per_replica=4)
    old = prefix_hashes("o" * 300, 100)
    index.record("gpu", old)
    new = prefix_hashes("n" * 200, 100)
    index.record("gpu", new)
    assert len(index) == 4
    assert index.matched("gpu", new) == 2
    assert index.matched("gpu", old) == 2  # the old prompt lost its third block, not its first
