"""The invariants of the parts, held by the composed policy: ``FairShare`` over random pools.

The parts have their own properties (test_apportion, test_priority, test_tree);
these check that the policy wires them together without losing one: a caller
keeping the within-share count as documented never holds more within-share
requests than reserved, in total never more than C; every within-share
priority is below every borrowing one; a borrower's rank is its standing's rank,
and the standings' ranks are dense.
"""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from fairgate.fairshare import FairShare, PriorityClass

ORGS = ("a", "b", "c", "d")


@st.composite
def pools(draw: st.DrawFn) -> tuple[FairShare, dict[str, float]]:
    """A policy over one pool ``p`` with 1–4 organisations, and a usage per organisation."""
    capacity = draw(st.integers(min_value=1, max_value=300))
    orgs = draw(st.lists(st.sampled_from(ORGS), min_size=1, max_size=4, unique=True))
    weights = draw(st.lists(st.integers(1, 100), min_size=len(orgs), max_size=len(orgs)))
    spare = draw(st.integers(min_value=0, max_value=100))  # unshared part of the pool
    total = sum(weights) + spare
    shares = {org: w / total for org, w in zip(orgs, weights, strict=True)}
    usage = {
        org: draw(st.one_of(st.just(0.0), st.floats(0.0, 1e6, allow_nan=False)))
        for org in draw(st.lists(st.sampled_from(ORGS), unique=True))
    }
    return FairShare({"p": capacity}, {"p": shares}), usage


# Each step: an organisation sends a request (True) or one of its requests ends (False).
steps = st.lists(st.tuples(st.sampled_from(ORGS), st.booleans()), max_size=400)


@settings(max_examples=200, deadline=None)
@given(pools(), steps, st.sampled_from(list(PriorityClass)))
def test_within_share_requests_never_exceed_the_reservation_nor_outrank_a_borrower(
    pool: tuple[FairShare, dict[str, float]],
    arrivals: list[tuple[str, bool]],
    cls: PriorityClass,
) -> None:
    policy, usage = pool
    reservations = policy.reservations("p")
    assert sum(reservations.values()) <= policy.capacity("p")
    within: dict[str, int] = dict.fromkeys(ORGS, 0)
    within_priorities: set[int] = set()
    borrowing_priorities: set[int] = set()
    for org, sends in arrivals:
        if not sends:
            within[org] = max(0, within[org] - 1)  # one of its within-share requests ends
            continue
        decision = policy.decide("p", org, cls, within[org], usage)
        if decision.within_share:
            within[org] += 1
            within_priorities.add(decision.priority)
        else:
            borrowing_priorities.add(decision.priority)
        assert within[org] <= reservations.get(org, 0)
        assert sum(within.values()) <= policy.capacity("p")
    if within_priorities and borrowing_priorities:
        assert max(within_priorities) < min(borrowing_priorities)


@settings(max_examples=200, deadline=None)
@given(pools(), st.sampled_from(list(PriorityClass)))
# a usage so small next to the total that its fraction underflows to 0 (decayed for
# about a thousand half-lives): it counts as no usage, it must not divide by zero
@example((FairShare({"p": 1}, {"p": {"a": 1.0}}), {"a": 2.0, "b": 5e-324}), PriorityClass.BATCH)
def test_a_borrower_gets_its_standing_rank_and_ranks_are_dense(
    pool: tuple[FairShare, dict[str, float]], cls: PriorityClass
) -> None:
    policy, usage = pool
    standings = policy.standings("p", usage)
    ranks = sorted({s.rank for s in standings.values()})
    assert ranks == list(range(len(ranks)))
    for org, standing in standings.items():
        full = policy.reservations("p").get(org, 0)  # at its reservation: it borrows
        decision = policy.decide("p", org, cls, full, usage)
        assert not decision.within_share
        assert decision.rank == standing.rank
