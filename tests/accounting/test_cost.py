"""Cost of a request: configured GPU-hour prices, integer micro-units, rounded up once."""

from __future__ import annotations

from fairgate.accounting import Prices, prices_by_model
from fairgate.config.catalog import Cost, Model
from fairgate.core.money import Money
from fairgate.proxy.reservation import Reservation
from fairgate.proxy.usage import Usage


def test_the_worked_example_of_the_module_docstring() -> None:
    prices = Prices.from_model(Cost(input_per_mtok=0.5, output_per_mtok=1.5, cached_per_mtok=0.05))
    assert prices == Prices(input_micro=500_000, output_micro=1_500_000, cached_micro=50_000)
    usage = Usage(prompt_tokens=1200, completion_tokens=300, cached_tokens=200)
    assert prices.cost_of(usage) == Money(960)
    assert str(prices.cost_of(usage)) == "0.00096"


def test_cached_tokens_are_charged_at_the_cached_price_not_twice() -> None:
    prices = Prices(input_micro=1_000_000, output_micro=0, cached_micro=0)
    all_cached = Usage(prompt_tokens=1_000_000, completion_tokens=0, cached_tokens=1_000_000)
    none_cached = Usage(prompt_tokens=1_000_000, completion_tokens=0, cached_tokens=0)
    assert prices.cost_of(all_cached) == Money(0)
    assert prices.cost_of(none_cached) == Money(1_000_000)


def test_rounding_happens_once_per_request_and_upwards() -> None:
    # One token in and one out at 1 micro per Mtok: 2e-6 micro in all, rounded up to 1.
    # Rounding each part separately would charge 2.
    prices = Prices(input_micro=1, output_micro=1, cached_micro=1)
    assert prices.cost_of(Usage(prompt_tokens=1, completion_tokens=1)) == Money(1)
    assert prices.cost_of(Usage()) == Money(0)


def test_reported_cached_tokens_beyond_the_prompt_and_negative_counts_are_clamped() -> None:
    prices = Prices(input_micro=2_000_000, output_micro=3_000_000, cached_micro=1_000_000)
    odd = Usage(prompt_tokens=10, completion_tokens=-5, cached_tokens=50)
    assert prices.cost_of(odd) == Money(10)  # ten cached tokens at 1 micro each


def test_an_estimated_usage_is_priced_like_a_reported_one() -> None:
    prices = Prices(input_micro=1_000_000, output_micro=2_000_000)
    estimate = Reservation(prompt_tokens=1001, completion_tokens=3).usage()
    assert estimate.estimated
    assert (estimate.prompt_tokens, estimate.completion_tokens) == (1001, 3)
    assert prices.cost_of(estimate) == Money(1001 + 6)


def test_prices_come_from_the_configured_models_rounded_half_up_at_load() -> None:
    models = [
        Model.model_validate(
            {
                "name": name,
                "upstreams": [{"name": "u", "url": "http://127.0.0.1:9"}],
                "cost": cost,
            }
        )
        for name, cost in (
            (
                "big",
                {"input_per_mtok": 0.25, "output_per_mtok": 0.75, "cached_per_mtok": 0.0000005},
            ),
            ("free", {}),
        )
    ]
    table = prices_by_model(models)
    assert table["big"] == Prices(input_micro=250_000, output_micro=750_000, cached_micro=1)
    assert table["free"].cost_of(Usage(prompt_tokens=10**9, completion_tokens=10**9)) == Money(0)
