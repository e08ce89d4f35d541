"""Money as integer micro-units: GPU-hours (or any unit) times 1,000,000, never a float.

    Money.from_units(0.25) == Money(250_000)
    cost_of(tokens=2_000_000, per_mtok_micro=20_000) == Money(40_000)   # 0.02 GPU-h per Mtok

Conversions from configuration floats round half-up once, at load; arithmetic
afterwards is exact integer arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

__all__ = ["MICRO", "Money", "cost_of"]

MICRO = 1_000_000


@dataclass(frozen=True, slots=True, order=True)
class Money:
    """An amount in micro-units (1 unit = 1,000,000 micro)."""

    micro: int

    @classmethod
    def from_units(cls, units: float | str | Decimal) -> Money:
        value = (Decimal(str(units)) * MICRO).quantize(Decimal(1), rounding=ROUND_HALF_UP)
        return cls(int(value))

    @classmethod
    def exact(cls, units: float | str | Decimal) -> Money:
        """An amount typed by a person (a budget, an increase), kept exactly: ValueError
        when it is finer than one micro-unit or not finite, where ``from_units`` would
        round (a cap of 0.0000001 became 0) or fail later."""
        value = Decimal(str(units)) * MICRO
        if not value.is_finite() or value != value.to_integral_value():
            raise ValueError("not a whole number of micro-units")
        return cls(int(value))

    def units(self) -> Decimal:
        return Decimal(self.micro) / MICRO

    def __add__(self, other: Money) -> Money:
        return Money(self.micro + other.micro)

    def __sub__(self, other: Money) -> Money:
        return Money(self.micro - other.micro)

    def __str__(self) -> str:
        return f"{self.units():f}"


def cost_of(tokens: int, per_mtok_micro: int) -> Money:
    """Cost of ``tokens`` at a price of ``per_mtok_micro`` micro-units per million tokens.

    Rounds up to the next micro-unit, so a non-zero usage is never free.
    """
    if tokens <= 0 or per_mtok_micro <= 0:
        return Money(0)
    return Money(-(-tokens * per_mtok_micro // 1_000_000))
