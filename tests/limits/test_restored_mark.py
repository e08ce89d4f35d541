"""The restore mark: how a gateway tells that the back end lost the spend it restored."""

from __future__ import annotations

from fairgate.core.money import Money
from fairgate.limits import Budget, CounterStore, Limiter

NOW = 1_800_000_000.0


async def test_the_mark_is_absent_on_a_fresh_back_end_and_kept_once_left(
    store: CounterStore,
) -> None:
    limiter = Limiter(store)
    assert not await limiter.holds_restored_spend(NOW)
    await limiter.restore(Budget("team", "t", None, "month", max=Money(10)), Money(4), NOW)
    assert not await limiter.holds_restored_spend(NOW)  # restoring leaves no mark by itself
    await limiter.mark_restored(NOW)
    assert await limiter.holds_restored_spend(NOW)
    assert await limiter.holds_restored_spend(NOW + 400 * 86400)  # months later still
    await limiter.mark_restored(NOW + 1)  # idempotent
    assert await Limiter(store).holds_restored_spend(NOW)  # another gateway sees it
