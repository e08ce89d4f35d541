"""The public names of limits/ and state/ are exactly these."""

from __future__ import annotations

import fairgate.limits
import fairgate.state


def test_limits_exports() -> None:
    assert sorted(fairgate.limits.__all__) == sorted(
        [
            "BYTES_PER_TOKEN",
            "Admission",
            "Budget",
            "BudgetBook",
            "BudgetUsage",
            "Calendar",
            "Charge",
            "Claim",
            "CounterStore",
            "Demand",
            "FairShareState",
            "InFlightCharge",
            "MarkCharge",
            "Increase",
            "Lease",
            "LeaseRefresher",
            "Limiter",
            "Limits",
            "Outage",
            "PeriodCharge",
            "PeriodKind",
            "PeriodSpan",
            "ScopeKind",
            "SlidingWindow",
            "StateUnavailable",
            "Subject",
            "Usage",
            "Verdict",
            "WindowCharge",
            "estimate_tokens",
            "prompt_tokens",
        ]
    )
    for name in fairgate.limits.__all__:
        assert getattr(fairgate.limits, name) is not None


def test_state_exports() -> None:
    assert sorted(fairgate.state.__all__) == [
        "Breaker",
        "MemoryCounterStore",
        "MemoryResponseOwners",
        "RedisCounterStore",
        "RedisNotices",
        "RedisResponseOwners",
    ]
    for name in fairgate.state.__all__:
        assert getattr(fairgate.state, name) is not None
