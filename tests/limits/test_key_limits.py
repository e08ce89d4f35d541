"""A key's limits and its team's defaults."""

from __future__ import annotations

import pytest

from fairgate.limits import Limits


def test_a_key_inherits_only_the_limits_it_does_not_set() -> None:
    team = Limits(rpm=60, tpm=10_000, rpd=1_000, max_in_flight=4)
    key = Limits(rpm=600, max_in_flight=1)
    assert key.with_defaults(team) == Limits(rpm=600, tpm=10_000, rpd=1_000, max_in_flight=1)
    assert Limits().with_defaults(Limits()) == Limits()


@pytest.mark.parametrize("field", ["rpm", "tpm", "rpd", "max_in_flight"])
def test_a_limit_of_zero_or_less_is_refused(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        Limits(**{field: 0})
