"""ULIDs: sortable by creation time, not guessable from a neighbour."""

from __future__ import annotations

import re

from fairgate.store import new_ulid

_CROCKFORD = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}")


def test_ids_are_26_crockford_characters() -> None:
    for _ in range(50):
        assert _CROCKFORD.fullmatch(new_ulid())


def test_later_ids_sort_after_earlier_ones() -> None:
    stamps = [1_700_000_000.0 + i * 0.001 for i in range(100)]
    ids = [new_ulid(t) for t in stamps]
    assert ids == sorted(ids)


def test_two_ids_of_the_same_millisecond_differ_in_their_random_part() -> None:
    ids = {new_ulid(1_700_000_000.0) for _ in range(1000)}
    assert len(ids) == 1000
    assert len({i[:10] for i in ids}) == 1  # same time part
