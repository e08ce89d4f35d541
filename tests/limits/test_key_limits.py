"""A key's limits bounded by its team's."""

from __future__ import annotations

import pytest

from fairgate.core.errors import BadRequest
from fairgate.limits import Limits


def test_a_key_inherits_what_it_does_not_set_and_never_exceeds_its_team() -> None:
    team = Limits(rpm=60, tpm=10_000, rpd=1_000, max_in_flight=4)
    key = Limits(rpm=600, max_in_flight=1)
    # rpm 600 asked, the team allows 60 per key: 60; in flight 1 is narrower: 1
    assert key.within(team) == Limits(rpm=60, tpm=10_000, rpd=1_000, max_in_flight=1)
    assert Limits().within(Limits()) == Limits()
    assert Limits(rpm=5).within(Limits()) == Limits(rpm=5)


@pytest.mark.parametrize("field", ["rpm", "tpm", "rpd", "max_in_flight"])
def test_a_limit_of_zero_or_less_is_refused(field: str) -> None:
    with pytest.raises(BadRequest, match=field):
        Limits(**{field: 0})
