"""Priority bands: order, ceilings, the default band and the team → band map."""

from __future__ import annotations

import math

import pytest

from fairgate.admission import Band, Bands

PRODUCT = (("platinum", 1.5), ("gold", 1.0), ("bronze", 0.8))


def test_bands_keep_their_order_as_ranks_from_the_top() -> None:
    bands = Bands(PRODUCT)
    assert [(b.name, b.rank) for b in bands] == [("platinum", 0), ("gold", 1), ("bronze", 2)]
    assert len(bands) == 3 and "gold" in bands and "diamond" not in bands
    assert bands.get("gold") == Band("gold", 1.0, 1)
    with pytest.raises(KeyError):
        bands.get("diamond")


def test_only_a_ceiling_above_one_is_never_held() -> None:
    bands = Bands(PRODUCT)
    assert [b.never_held for b in bands] == [True, False, False]
    assert not Band("edge", 1.0, 0).never_held  # 1.0 flows up to full, no further


def test_the_default_band_is_the_lowest_unless_named() -> None:
    assert Bands(PRODUCT).default.name == "bronze"
    assert Bands(PRODUCT, default="gold").default.name == "gold"


def test_a_team_gets_its_own_band_or_the_default() -> None:
    bands = Bands(PRODUCT, default="gold", teams={"lab-nlp": "platinum", "lab-chem": "bronze"})
    assert bands.for_team("lab-nlp").name == "platinum"
    assert bands.for_team("lab-chem").name == "bronze"
    assert bands.for_team("lab-vision").name == "gold"


@pytest.mark.parametrize(
    ("entries", "options", "message"),
    [
        ((), {}, "at least one band"),
        ((("a", 1.0), ("a", 0.5)), {}, "duplicate band"),
        ((("a", 0.0),), {}, "finite number > 0"),
        ((("a", math.inf),), {}, "finite number > 0"),
        ((("a", math.nan),), {}, "finite number > 0"),
        ((("low", 0.8), ("high", 1.0)), {}, "above the ceiling of the band above"),
        ((("a", 1.0),), {"default": "b"}, "unknown band 'b'"),
        ((("a", 1.0),), {"teams": {"t": "b"}}, "team 't': unknown band 'b'"),
    ],
)
def test_invalid_bands_are_refused(
    entries: tuple[tuple[str, float], ...], options: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Bands(entries, **options)  # type: ignore[arg-type]


def test_equal_ceilings_are_allowed() -> None:
    bands = Bands((("a", 1.0), ("b", 1.0)))
    assert [b.ceiling for b in bands] == [1.0, 1.0]
