"""The public names of fairgate.fairshare."""

from __future__ import annotations

import fairgate.fairshare as fairshare


def test_exported_members() -> None:
    assert set(fairshare.__all__) == {
        "BORROW_BASE",
        "DEFAULT_HALF_LIFE",
        "MAX_RANK",
        "RANK_STEP",
        "DecayedUsage",
        "Decision",
        "FairShare",
        "PriorityClass",
        "Standing",
        "apportion",
        "borrowing_priority",
        "decay",
        "decide",
        "dense_ranks",
        "level_fairshare",
    }
    for name in fairshare.__all__:
        assert hasattr(fairshare, name)
