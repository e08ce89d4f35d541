"""The public names of fairgate.fairshare."""

from __future__ import annotations

import fairgate.fairshare as fairshare


def test_exported_members() -> None:
    assert set(fairshare.__all__) == {
        "BORROW_BASE",
        "DEFAULT_HALF_LIFE",
        "IN_ORG_BASE",
        "MAX_RANK",
        "RANK_STEP",
        "REST",
        "DecayedUsage",
        "Decision",
        "FairShare",
        "PriorityClass",
        "Standing",
        "TeamStanding",
        "apportion",
        "borrowing_priority",
        "decay",
        "decide",
        "decide_in_org",
        "dense_ranks",
        "fair_tree_ranks",
        "group_levels",
        "level_fairshare",
        "split",
    }
    for name in fairshare.__all__:
        assert hasattr(fairshare, name)
