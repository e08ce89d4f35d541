"""The head gate alone: in-flight counts and remembered refusals, with time passed in."""

from __future__ import annotations

import pytest

from fairgate.core.errors import RateLimited
from fairgate.limits.head import HeadGate


def rpm_refusal(retry: float) -> RateLimited:
    return RateLimited("rpm", code="rpm_limit_exceeded", retry_after=retry)


def refused(head: HeadGate, key: str = "k", **limits: int | None) -> RateLimited | None:
    rpm, rpd, flight = limits.get("rpm"), limits.get("rpd"), limits.get("max_in_flight")
    try:
        head.check(key, rpm, rpd, flight, limits.get("now") or 0.0)
    except RateLimited as error:
        return error
    return None


def test_a_key_at_its_in_flight_limit_in_this_process_is_refused_until_one_leaves() -> None:
    head = HeadGate()
    head.entered("k")
    assert refused(head, max_in_flight=2) is None
    head.entered("k")
    error = refused(head, max_in_flight=2)
    assert error is not None and error.code == "in_flight_limit_exceeded"
    assert "2 in flight" in error.message and error.retry_after == 1.0
    assert refused(head, "other", max_in_flight=1) is None  # per key
    assert refused(head, max_in_flight=3) is None  # a raised limit is obeyed at once
    assert refused(head) is None  # no limit, no refusal
    head.left("k")
    assert refused(head, max_in_flight=2) is None
    head.left("k")
    assert head.in_flight("k") == 0


def test_leaving_more_than_entered_never_goes_negative() -> None:
    head = HeadGate()
    head.left("k")
    head.entered("k")
    assert refused(head, max_in_flight=1) is not None


def test_an_rpm_refusal_is_reused_until_its_retry_after_with_the_remaining_wait() -> None:
    head = HeadGate()
    head.refused("k", rpm_refusal(30.0), 5, None, 100.0)
    error = refused(head, rpm=5, now=110.0)
    assert error is not None and error.code == "rpm_limit_exceeded" and error.message == "rpm"
    assert error.retry_after == pytest.approx(20.0, abs=0.01)
    assert refused(head, rpm=4, now=110.0) is not None  # a lower limit refuses too
    assert refused(head, rpm=6, now=110.0) is None  # a raised limit: ask the limiter
    assert refused(head, now=110.0) is None  # no limit any more
    assert refused(head, "other", rpm=5, now=110.0) is None
    assert refused(head, rpm=5, now=130.0) is None  # the window has room again
    assert refused(head, rpm=5, now=110.0) is None  # and the refusal is forgotten


def test_an_rpd_refusal_is_reused_against_the_daily_limit() -> None:
    head = HeadGate()
    day = RateLimited("rpd", code="rpd_limit_exceeded", retry_after=3600.0)
    head.refused("k", day, 1000, 10, 0.0)
    assert refused(head, rpm=1000, rpd=10, now=60.0) is not None
    assert refused(head, rpm=1, rpd=11, now=60.0) is None  # only the daily limit counts


def test_refusals_that_depend_on_the_request_are_not_remembered() -> None:
    head = HeadGate()
    for code in ("tpm_limit_exceeded", "budget_exceeded", "in_flight_limit_exceeded"):
        head.refused("k", RateLimited("x", code=code, retry_after=30.0), 1, 1, 0.0)
    head.refused("k", RateLimited("x", code="rpm_limit_exceeded", retry_after=None), 1, 1, 0.0)
    assert refused(head, rpm=1, rpd=1, now=1.0) is None


def test_the_refusal_table_is_bounded_and_makes_room_from_expired_entries() -> None:
    head = HeadGate(max_refusals=2)
    head.refused("a", rpm_refusal(10.0), 1, None, 0.0)
    head.refused("b", rpm_refusal(100.0), 1, None, 0.0)
    head.refused("c", rpm_refusal(100.0), 1, None, 5.0)  # full of live refusals: not kept
    assert refused(head, "c", rpm=1, now=6.0) is None
    head.refused("c", rpm_refusal(100.0), 1, None, 20.0)  # "a" expired: room for "c"
    assert refused(head, "c", rpm=1, now=21.0) is not None
    assert refused(head, "b", rpm=1, now=21.0) is not None
