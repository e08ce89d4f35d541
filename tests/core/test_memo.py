"""The bounded memo: at most its size, emptied when full, and only the keys it keeps."""

from __future__ import annotations

import pytest

from fairgate.core.memo import BoundedMemo


def test_a_kept_value_is_read_back_and_a_missing_one_is_none() -> None:
    memo = BoundedMemo[str, int](4)
    assert memo.get("a") is None
    assert memo.keep("a", 1) == 1
    assert memo.get("a") == 1
    assert len(memo) == 1


def test_it_never_holds_more_than_its_size_and_is_emptied_when_full() -> None:
    memo = BoundedMemo[int, int](3)
    for key in range(3):
        memo.keep(key, key * 10)
    assert len(memo) == 3
    memo.keep(3, 30)  # full: every earlier value is forgotten first
    assert len(memo) == 1
    assert [memo.get(key) for key in range(4)] == [None, None, None, 30]
    for key in range(100):
        memo.keep(key, key)
        assert len(memo) <= 3


def test_a_key_held_already_is_replaced_without_emptying_a_full_memo() -> None:
    memo = BoundedMemo[int, str](2)
    memo.keep(1, "one")
    memo.keep(2, "two")
    memo.keep(2, "deux")
    assert (memo.get(1), memo.get(2), len(memo)) == ("one", "deux", 2)


def test_a_key_it_does_not_keep_is_handed_back_and_not_held() -> None:
    memo = BoundedMemo[bytes, int](8, keeps=lambda key: len(key) <= 4)
    assert memo.keep(b"short", 5) == 5  # five bytes: worked out each time
    assert memo.get(b"short") is None
    assert len(memo) == 0
    memo.keep(b"ok", 2)
    assert memo.get(b"ok") == 2


def test_a_key_it_does_not_keep_does_not_empty_a_full_memo() -> None:
    memo = BoundedMemo[str, int](1, keeps=lambda key: key != "never")
    memo.keep("a", 1)
    memo.keep("never", 2)
    assert (memo.get("a"), memo.get("never")) == (1, None)


def test_clear_forgets_everything() -> None:
    memo = BoundedMemo[str, int](4)
    memo.keep("a", 1)
    memo.keep("b", 2)
    memo.clear()
    assert (len(memo), memo.get("a"), memo.get("b")) == (0, None, None)
    memo.keep("a", 3)  # and keeps again afterwards
    assert memo.get("a") == 3


def test_a_memo_holds_at_least_one_value() -> None:
    with pytest.raises(ValueError):
        BoundedMemo[str, int](0)


def test_a_memo_with_work_works_a_missing_value_out_once_and_stays_bounded() -> None:
    worked: list[str] = []

    def work(key: str) -> int:
        worked.append(key)
        return len(key)

    memo = BoundedMemo[str, int](3, work=work)
    assert list(map(memo.value, ["a", "bb", "a", "bb"])) == [1, 2, 1, 2]
    assert worked == ["a", "bb"]  # each worked out once, then read back
    for key in ("ccc", "dddd", "eeeee"):
        memo.value(key)
        assert len(memo) <= 3
    assert memo.get("a") is None  # emptied when full, worked out again when asked
    assert memo.value("a") == 1 and worked[-1] == "a"


def test_a_memo_with_work_holds_only_the_keys_it_keeps() -> None:
    memo = BoundedMemo[str, int](8, keeps=lambda key: len(key) < 3, work=len)
    assert memo.value("long") == 4
    assert (memo.get("long"), len(memo)) == (None, 0)


def test_a_memo_without_work_has_no_value_for_a_key_not_held() -> None:
    memo = BoundedMemo[str, int](2)
    with pytest.raises(KeyError):
        memo.value("a")
