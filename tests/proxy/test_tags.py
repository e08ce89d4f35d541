"""The tags a request adds (``proxy.tags``): decided per header value, organisation and key tags."""

from __future__ import annotations

import pytest

from fairgate.core.errors import BadRequest
from fairgate.core.principal import Principal
from fairgate.proxy.tags import TagPolicy

POLICY = TagPolicy(allowed=frozenset({"x"}), by_org={"a": frozenset({"w"})})


def test_the_same_header_is_decided_for_each_organisation_and_key_apart() -> None:
    a = Principal("k1", "a", "t", tags=("own",))
    assert POLICY.apply(a, b"w,x") == ("own", "w", "x")
    assert POLICY.apply(a, b"w,x") == ("own", "w", "x")  # asked again: the same answer
    # another organisation sending the same value: 'w' is org a's alone
    with pytest.raises(BadRequest, match="'w'") as refused:
        POLICY.apply(Principal("k2", "b", "t"), b"w,x")
    assert refused.value.code == "tag_not_allowed"
    # another key of org a, with other tags of its own
    assert POLICY.apply(Principal("k3", "a", "t", tags=("x",)), b"w,x") == ("x", "w")


def test_a_refused_value_stays_refused_and_no_header_adds_nothing() -> None:
    b = Principal("k2", "b", "t")
    for _ in range(2):
        with pytest.raises(BadRequest, match="tags must be ASCII"):
            POLICY.apply(b, "é".encode())
    assert POLICY.apply(b, None) is None


def test_a_long_header_value_is_checked_each_time_all_the_same() -> None:
    a = Principal("k1", "a", "t")
    raw = b"x," * 1000 + b"w"  # duplicates are one tag: valid, and too long to be held
    assert POLICY.apply(a, raw) == ("x", "w")
    assert POLICY.apply(a, raw) == ("x", "w")
