"""What a request cost, in integer micro GPU-hours, from the model's prices and its tokens.

    cost = ceil(((prompt − cached) × input + cached × cached_price + completion × output) / 10⁶)

with prices in micro GPU-hours per million tokens. Worked example, prices of
0.5 / 1.5 / 0.05 GPU-h per Mtok (input / output / cached) become 500,000 /
1,500,000 / 50,000 micro per Mtok; 1,200 prompt tokens of which 200 cached and
300 completion tokens cost
``(1,000 × 500,000 + 200 × 50,000 + 300 × 1,500,000) / 10⁶ = 960`` micro GPU-h,
i.e. 0.000960 GPU-h. The division rounds up once, for the whole request, so a
request that used anything is never free and rounding never compounds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from fairgate.core.money import Money

__all__ = ["ModelCost", "Prices", "TokenCounts", "prices_by_model"]

_MTOK = 1_000_000


class ModelCost(Protocol):
    """A model's configured prices (``models[].cost``): GPU-hours per million tokens, ≥ 0."""

    @property
    def input_per_mtok(self) -> float: ...

    @property
    def output_per_mtok(self) -> float: ...

    @property
    def cached_per_mtok(self) -> float: ...


class TokenCounts(Protocol):
    """Token usage of one request (``fairgate.proxy.usage.Usage`` is one)."""

    @property
    def prompt_tokens(self) -> int: ...

    @property
    def completion_tokens(self) -> int: ...

    @property
    def cached_tokens(self) -> int: ...


class _PricedModel(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def cost(self) -> ModelCost: ...


@dataclass(frozen=True, slots=True)
class Prices:
    """One model's prices in micro GPU-hours per million tokens (integers, ≥ 0).

    Built once per model when the configuration is loaded; :meth:`cost_of` is
    pure integer arithmetic, cheap enough for every request.
    """

    input_micro: int = 0
    output_micro: int = 0
    cached_micro: int = 0

    @classmethod
    def from_model(cls, cost: ModelCost) -> Prices:
        """Prices from ``models[].cost``; each float rounds half-up to a micro-unit, once."""
        return cls(
            input_micro=Money.from_units(cost.input_per_mtok).micro,
            output_micro=Money.from_units(cost.output_per_mtok).micro,
            cached_micro=Money.from_units(cost.cached_per_mtok).micro,
        )

    def cost_of(self, usage: TokenCounts) -> Money:
        """The cost of ``usage``, rounded up to the next micro GPU-hour.

        Cached tokens are part of the prompt: they are charged at the cached
        price and the rest of the prompt at the input price. A count below zero
        counts as zero, and cached tokens beyond the prompt count as prompt.
        """
        # comparisons, not max/min: this runs twice for every request
        prompt = usage.prompt_tokens
        if prompt < 0:
            prompt = 0
        cached = usage.cached_tokens
        if cached < 0:
            cached = 0
        elif cached > prompt:
            cached = prompt
        completion = usage.completion_tokens
        if completion < 0:
            completion = 0
        scaled = (
            (prompt - cached) * self.input_micro
            + cached * self.cached_micro
            + completion * self.output_micro
        )
        return Money(-(-scaled // _MTOK))


def prices_by_model(models: Iterable[_PricedModel]) -> Mapping[str, Prices]:
    """Each configured model's canonical name → its :class:`Prices` (``config.models``)."""
    return {model.name: Prices.from_model(model.cost) for model in models}
