"""What the planner hands a store: charges with their layout, kinds found once."""

from __future__ import annotations

import pytest

from fairgate.limits.charges import (
    Charges,
    InFlightCharge,
    Layout,
    PeriodCharge,
    WindowCharge,
    layout_of,
)

T0 = 1_700_000_040.0


def test_a_layout_lists_each_kind_by_position_and_windows_by_shape() -> None:
    charges = (
        WindowCharge("rpm:k", 1, 10),
        WindowCharge("tpm:k", 5, 100),
        PeriodCharge("rpd:k:d", 1, 10, T0 + 60, T0 + 120),
        InFlightCharge("inflight:k", 2),
        WindowCharge("r:h", 1, 10, window=3600.0, granules=60),
        WindowCharge("team-rpm:t", 1, 10),
        PeriodCharge("budget:b", 3, 100, T0 + 60, T0 + 120, overdraft=True),
    )
    layout = Layout.of(charges)
    assert layout.windows == ((60.0, 60, (0, 1, 5)), (3600.0, 60, (4,)))
    assert layout.periods == (2, 6)
    assert layout.in_flight == (3,)


def test_a_layout_refuses_two_charges_of_one_counter() -> None:
    with pytest.raises(ValueError, match="same counter"):
        Layout.of((WindowCharge("rpm:k", 1, 10), WindowCharge("rpm:k", 1, 5)))


def test_planned_charges_are_a_tuple_that_carries_its_layout() -> None:
    charges = (WindowCharge("rpm:k", 1, 10), InFlightCharge("inflight:k", 2))
    layout = Layout.of(charges)
    planned = Charges(charges, layout)
    assert planned == charges and isinstance(planned, tuple)
    assert layout_of(planned) is layout
    assert layout_of(list(charges)) == layout  # worked out for a plain sequence
