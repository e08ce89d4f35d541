"""Every registered Picker honours the contract: one of the given replicas, reproducible."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairgate.core.replica import ReplicaSnapshot
from fairgate.routing import PICKERS, build_picker

from ..replicas import replica_lists

scored_lists = replica_lists.flatmap(
    lambda rs: st.lists(st.floats(0, 1), min_size=len(rs), max_size=len(rs)).map(
        lambda totals: list(zip(rs, totals, strict=True))
    )
)


@pytest.mark.parametrize("name", list(PICKERS))
@settings(max_examples=100, deadline=None)
@given(scored=scored_lists, seed=st.integers(0, 2**32), cursor=st.integers(0, 10**6))
def test_picks_one_of_the_given_replicas_reproducibly(
    name: str, scored: list[tuple[ReplicaSnapshot, float]], seed: int, cursor: int
) -> None:
    picker = build_picker(name)
    pick = picker.pick(scored, random.Random(seed), cursor)
    if not scored:
        assert pick.replica is None
        assert pick.cursor == cursor
        return
    assert any(pick.replica is r for r, _ in scored)
    assert pick.cursor in (cursor, cursor + 1)
    assert picker.pick(scored, random.Random(seed), cursor) == pick


@pytest.mark.parametrize("name", list(PICKERS))
def test_names_match_the_registry(name: str) -> None:
    assert build_picker(name).name == name
