"""Conformance suite of the FairShareState protocol: memory and Redis pass the same tests."""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import AsyncIterator

import pytest

from fairgate.fairshare import DecayedUsage, FairShare, PriorityClass
from fairgate.limits import Claim, FairShareState
from fairgate.limits.fairshare_state import Split
from fairgate.state import MemoryCounterStore, RedisCounterStore
from redis_keys import delete_prefix

T0 = 1_700_000_040.0
HOUR = 3600.0
WEEK = 168 * HOUR


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def state(request: pytest.FixtureRequest) -> AsyncIterator[FairShareState]:
    if request.param == "memory":
        yield MemoryCounterStore()
        return
    url: str = request.getfixturevalue("redis_url")
    prefix = f"fgtest:{uuid.uuid4().hex}:"
    store = RedisCounterStore(url, prefix=prefix, timeout=5.0)  # the machine is shared
    try:
        yield store
    finally:
        await store.aclose()
        await delete_prefix(url, prefix)


async def within(state: FairShareState, pool: str, org: str, reservation: int, n: int) -> int:
    """How many of ``n`` sequential claims are within share (the claims are kept)."""
    claims = [await state.claim(pool, org, reservation, T0) for _ in range(n)]
    return sum(c.within_share for c in claims)


async def test_200_concurrent_claims_never_exceed_the_reservation(state: FairShareState) -> None:
    claims = await asyncio.gather(*(state.claim("b300", "etabA", 7, T0) for _ in range(200)))
    taken = [c for c in claims if c.within_share]
    assert len(taken) == 7
    assert sorted(c.in_flight for c in taken) == list(range(7))  # each saw the ones before
    assert len({c.lease for c in taken}) == 7 and None not in {c.lease for c in taken}
    borrowing = [c for c in claims if not c.within_share]
    assert all(c.lease is None and c.in_flight == 7 for c in borrowing)


async def test_a_claim_agrees_with_the_policy_decision(state: FairShareState) -> None:
    policy = FairShare({"b300": 10}, {"b300": {"etabA": 0.8125, "etabB": 0.1875}})
    reservation = policy.reservations("b300")["etabB"]  # 2
    for expected in (True, True, False, False):
        claim = await state.claim("b300", "etabB", reservation, T0)
        decision = policy.decide("b300", "etabB", PriorityClass.BATCH, claim.in_flight, {})
        assert claim.within_share is decision.within_share is expected


async def test_release_frees_a_slot_and_twice_frees_nothing_more(state: FairShareState) -> None:
    first, second = [await state.claim("p", "org", 2, T0) for _ in range(2)]
    assert first.within_share and second.within_share
    assert not (await state.claim("p", "org", 2, T0)).within_share
    await state.release(first)
    await state.release(first)  # idempotent: must not free ``second``'s slot as well
    again = await state.claim("p", "org", 2, T0 + 1)
    assert again.within_share and again.in_flight == 1
    assert not (await state.claim("p", "org", 2, T0 + 1)).within_share


async def test_releasing_a_borrowing_claim_changes_nothing(state: FairShareState) -> None:
    assert (await state.claim("p", "org", 1, T0)).within_share
    borrowed = await state.claim("p", "org", 1, T0)
    assert not borrowed.within_share
    await state.release(borrowed)
    assert not (await state.claim("p", "org", 1, T0)).within_share


async def test_a_reservation_of_zero_always_borrows(state: FairShareState) -> None:
    claims = [await state.claim("p", "guest", 0, T0) for _ in range(3)]
    assert all(not c.within_share and c.lease is None and c.in_flight == 0 for c in claims)


async def test_pools_and_organisations_count_apart(state: FairShareState) -> None:
    assert await within(state, "p", "a", 2, 3) == 2
    assert await within(state, "p", "b", 2, 3) == 2
    assert await within(state, "q", "a", 2, 3) == 2
    # names that would meet in a naive "pool:org" key stay apart too
    assert await within(state, "x:y", "z", 1, 2) == 1
    assert await within(state, "x", "y:z", 1, 2) == 1


async def test_a_claimer_cancelled_before_it_ran_holds_nothing(state: FairShareState) -> None:
    tasks = [asyncio.create_task(state.claim("p", "org", 3, T0)) for _ in range(10)]
    for task in tasks:
        task.cancel()  # before any of them got to run
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, asyncio.CancelledError) for r in results)
    assert await within(state, "p", "org", 3, 4) == 3


async def test_a_slot_released_by_a_cancelled_releaser_is_still_freed(
    state: FairShareState,
) -> None:
    claim = await state.claim("p", "org", 1, T0)
    release = asyncio.create_task(state.release(claim))
    await asyncio.sleep(0)  # the release has started (or finished)
    release.cancel()
    await asyncio.gather(release, return_exceptions=True)
    freed: Claim | None = None
    for _ in range(200):  # bounded: the shielded release finishes on its own
        freed = await state.claim("p", "org", 1, T0)
        if freed.within_share:
            break
        await asyncio.sleep(0.05)
    assert freed is not None and freed.within_share


async def test_in_flight_counts_the_within_share_slots_held_per_organisation(
    state: FairShareState,
) -> None:
    assert await state.in_flight("p", T0) == {}
    a = [await state.claim("p", "a", 2, T0) for _ in range(3)]  # two within share, one borrows
    b = await state.claim("p", "b", 3, T0)
    await state.claim("p", "guest", 0, T0)  # a reservation of 0 holds nothing
    await state.claim("q", "a", 1, T0)
    assert await state.in_flight("p", T0) == {"a": 2, "b": 1}
    assert await state.in_flight("q", T0) == {"a": 1}
    await state.release(a[2])  # the borrower: nothing changes
    await state.release(a[0])
    assert await state.in_flight("p", T0) == {"a": 1, "b": 1}
    await state.release(a[1])
    await state.release(b)
    assert await state.in_flight("p", T0) == {}  # organisations holding none are left out
    assert await state.in_flight("q", T0) == {"a": 1}


async def test_in_flight_agrees_with_concurrent_claims(state: FairShareState) -> None:
    claims = await asyncio.gather(*(state.claim("b300", "etabA", 7, T0) for _ in range(50)))
    assert await state.in_flight("b300", T0) == {"etabA": 7}
    await asyncio.gather(*(state.release(c) for c in claims[:25]))
    held = sum(c.within_share for c in claims[25:])
    assert await state.in_flight("b300", T0) == ({"etabA": held} if held else {})


async def test_in_flight_keeps_awkward_names_apart(state: FairShareState) -> None:
    names = [("x:y", "z"), ("x", "y:z"), ("x", "50%:off"), ("x", "50%3Aoff"), ("x", "é 漢")]
    for pool, org in names:
        assert (await state.claim(pool, org, 2, T0)).within_share
    assert await state.in_flight("x", T0) == {"y:z": 1, "50%:off": 1, "50%3Aoff": 1, "é 漢": 1}
    assert await state.in_flight("x:y", T0) == {"z": 1}


async def test_a_pool_without_usage_reads_empty(state: FairShareState) -> None:
    assert await state.usage("p", T0, WEEK) == {}


async def test_one_half_life_halves_usage(state: FairShareState) -> None:
    await state.charge("p", "a", 8.0, T0, WEEK)
    assert (await state.usage("p", T0, WEEK))["a"] == pytest.approx(8.0, rel=1e-12)
    assert (await state.usage("p", T0 + WEEK, WEEK))["a"] == pytest.approx(4.0, rel=1e-12)
    assert (await state.usage("p", T0 + 2 * WEEK, WEEK))["a"] == pytest.approx(2.0, rel=1e-12)
    # read with another half-life, the same record decays at that rate
    assert (await state.usage("p", T0 + WEEK, 2 * WEEK))["a"] == pytest.approx(
        8.0 / math.sqrt(2.0), rel=1e-12
    )


async def test_charges_compose_as_the_exact_decay(state: FairShareState) -> None:
    expected = DecayedUsage(half_life=HOUR)
    moments = [T0 + 0.0, T0 + 17.5, T0 + 1800.0, T0 + 1800.0, T0 + 9000.25, T0 + 86_400.0]
    costs = [1 / 3, 2.5, 0.0, 7.125, 1e-6, 40.0]
    for now, cost in zip(moments, costs, strict=True):
        await state.charge("p", "a", cost, now, HOUR)
        expected = expected.charged(cost, now)
        got = (await state.usage("p", now, HOUR))["a"]
        assert got == pytest.approx(expected.value_at(now), rel=1e-12)
    later = T0 + 90_000.0
    assert (await state.usage("p", later, HOUR))["a"] == pytest.approx(
        expected.value_at(later), rel=1e-12
    )


async def test_usage_never_grows_by_going_back_in_time(state: FairShareState) -> None:
    await state.charge("p", "a", 8.0, T0 + HOUR, HOUR)
    await state.charge("p", "a", 2.0, T0, HOUR)  # a gateway whose clock is behind
    assert (await state.usage("p", T0 + HOUR, HOUR))["a"] == pytest.approx(10.0, rel=1e-12)
    assert (await state.usage("p", T0, HOUR))["a"] == pytest.approx(10.0, rel=1e-12)
    assert (await state.usage("p", T0 + 2 * HOUR, HOUR))["a"] == pytest.approx(5.0, rel=1e-12)


async def test_usage_is_kept_per_pool_and_organisation(state: FairShareState) -> None:
    await state.charge("p", "a", 3.0, T0, WEEK)
    await state.charge("p", "b", 1.0, T0, WEEK)
    await state.charge("q", "a", 5.0, T0, WEEK)
    p, q = await state.usage("p", T0, WEEK), await state.usage("q", T0, WEEK)
    assert p == pytest.approx({"a": 3.0, "b": 1.0}, rel=1e-12)
    assert q == pytest.approx({"a": 5.0}, rel=1e-12)


@pytest.mark.parametrize("cost", [-1.0, math.nan, math.inf])
async def test_an_invalid_charge_is_refused_and_changes_nothing(
    state: FairShareState, cost: float
) -> None:
    await state.charge("p", "a", 1.0, T0, WEEK)
    with pytest.raises(ValueError, match="finite and non-negative"):
        await state.charge("p", "a", cost, T0, WEEK)
    assert (await state.usage("p", T0, WEEK))["a"] == pytest.approx(1.0, rel=1e-12)


async def test_an_infinite_half_life_never_decays(state: FairShareState) -> None:
    await state.charge("p", "a", 2.0, T0, math.inf)
    await state.charge("p", "a", 3.0, T0 + 10 * WEEK, math.inf)
    assert (await state.usage("p", T0 + 100 * WEEK, math.inf))["a"] == pytest.approx(5.0)


# Team sub-shares: an organisation of reservation 10 split research 7 / ops 3 (shares
# 0.7 / 0.3); a team without a share claims in the rest (here 0 seats of its own).
SPLIT_R = Split("research", 7, ("research", "ops"))
SPLIT_O = Split("ops", 3, ("research", "ops"))
SPLIT_REST = Split("", 0, ("research", "ops"))


async def test_concurrent_team_claims_never_exceed_any_reservation(state: FairShareState) -> None:
    claims = await asyncio.gather(
        *(state.claim("p", "A", 10, T0, SPLIT_R, "research") for _ in range(60)),
        *(state.claim("p", "A", 10, T0, SPLIT_O, "ops") for _ in range(60)),
    )
    own = {
        team: [c for c in claims if c.within_share and not c.in_org and c.group == team]
        for team in ("research", "ops")
    }
    in_org = [c for c in claims if c.in_org]
    # each team holds exactly its sub-reservation of its own, whatever the interleaving
    assert len(own["research"]) == 7 and len(own["ops"]) == 3
    # an in-org seat is taken only while the organisation holds fewer than 10 in all
    assert len(in_org) <= 7
    assert all(c.in_flight < 10 for c in in_org)
    assert len({c.in_flight for c in in_org}) == len(in_org)  # each saw the ones before
    assert all(c.lease is not None for c in in_org)
    assert all(c.lease is None and c.in_flight >= 10 for c in claims if not c.within_share)
    held = await state.in_flight("p", T0, {"A": ("research", "ops")})
    assert held == {"A": 10 + len(in_org)}


async def test_a_lone_team_borrows_its_siblings_idle_seats_then_the_pool(
    state: FairShareState,
) -> None:
    claims = [await state.claim("p", "A", 10, T0, SPLIT_R, "research") for _ in range(12)]
    assert [(c.within_share, c.in_org) for c in claims] == (
        [(True, False)] * 7 + [(True, True)] * 3 + [(False, False)] * 2
    )
    assert [c.in_flight for c in claims[7:10]] == [7, 8, 9]  # the organisation's total before


async def test_a_returning_sibling_is_within_its_sub_reservation_while_seats_are_lent(
    state: FairShareState,
) -> None:
    lent = [await state.claim("p", "A", 10, T0, SPLIT_R, "research") for _ in range(10)]
    assert sum(c.in_org for c in lent) == 3
    back = [await state.claim("p", "A", 10, T0, SPLIT_O, "ops") for _ in range(4)]
    # the organisation's seats are all held, yet ops' three are its own
    assert [(c.within_share, c.in_org) for c in back] == [(True, False)] * 3 + [(False, False)]
    # a borrower's seat given back goes to whoever claims next in the organisation
    await state.release(next(c for c in lent if c.in_org))
    assert (await state.claim("p", "A", 10, T0, SPLIT_O, "ops")).within_share is False
    for claim in back[:3]:
        await state.release(claim)
    again = await state.claim("p", "A", 10, T0, SPLIT_O, "ops")
    assert again.within_share and not again.in_org


async def test_team_release_is_idempotent(state: FairShareState) -> None:
    first = [await state.claim("p", "A", 10, T0, SPLIT_O, "ops") for _ in range(10)]
    assert [c.in_org for c in first] == [False] * 3 + [True] * 7
    await state.release(first[0])
    await state.release(first[0])  # must not free another slot
    await state.release(first[5])
    await state.release(first[5])
    assert await state.in_flight("p", T0, {"A": ("research", "ops")}) == {"A": 8}
    taken = [await state.claim("p", "A", 10, T0, SPLIT_O, "ops") for _ in range(3)]
    assert [(c.within_share, c.in_org) for c in taken] == [
        (True, False),
        (True, True),
        (False, False),
    ]


async def test_teams_without_a_share_claim_in_the_rest(state: FairShareState) -> None:
    half = Split("", 5, ("research",))
    claims = [await state.claim("p", "B", 10, T0, half, t) for t in ["x", "y"] * 4]
    assert [c.within_share and not c.in_org for c in claims] == [True] * 5 + [False] * 3
    assert all(c.in_org for c in claims[5:])  # research's idle seats
    assert await state.team_in_flight("p", T0, {"B": ("research",)}) == {"B": {"x": 4, "y": 4}}


async def test_team_in_flight_counts_each_teams_slots(state: FairShareState) -> None:
    groups = {"A": ("research", "ops")}
    for _ in range(9):
        await state.claim("p", "A", 10, T0, SPLIT_R, "research")
    for _ in range(2):
        await state.claim("p", "A", 10, T0, SPLIT_O, "ops")
    await state.claim("p", "C", 3, T0, None, "c1")  # no team shares: named all the same
    await state.claim("p", "C", 3, T0, None, "c2")
    counts = await state.team_in_flight("p", T0, groups)
    assert counts == {"A": {"research": 9, "ops": 2}, "C": {"c1": 1, "c2": 1}}
    assert await state.in_flight("p", T0, groups) == {"A": 11, "C": 2}


async def test_a_team_reservation_of_zero_in_a_pool_borrows(state: FairShareState) -> None:
    claim = await state.claim("p", "A", 0, T0, Split("ops", 0, ("ops",)), "ops")
    assert not claim.within_share and claim.lease is None


async def test_charging_a_team_charges_its_organisation_too(state: FairShareState) -> None:
    await state.charge("p", "A", 3.0, T0, WEEK, team="research")
    await state.charge("p", "A", 1.0, T0, WEEK, team="ops")
    await state.charge("p", "A", 0.5, T0, WEEK)  # no team known: the organisation alone
    await state.charge("p", "x:y", 2.0, T0, WEEK, team="50%:off")
    assert (await state.usage("p", T0, WEEK)) == pytest.approx({"A": 4.5, "x:y": 2.0})
    teams = await state.team_usage("p", T0 + WEEK, WEEK)
    assert teams == {
        "A": pytest.approx({"research": 1.5, "ops": 0.5}),
        "x:y": pytest.approx({"50%:off": 1.0}),
    }
    assert await state.team_usage("q", T0, WEEK) == {}


async def test_team_claimers_cancelled_mid_way_hold_nothing(state: FairShareState) -> None:
    tasks = [asyncio.create_task(state.claim("p", "A", 10, T0, SPLIT_O, "ops")) for _ in range(10)]
    await asyncio.sleep(0)  # every claim has started (in Redis: its script is on its way)
    for task in tasks:
        task.cancel()
    for done in await asyncio.gather(*tasks, return_exceptions=True):
        if isinstance(done, Claim):  # answered before the cancel: its caller gives it back
            await state.release(done)
    expected = [(True, False)] * 3 + [(True, True)] * 7 + [(False, False)]
    freed: list[Claim] = []
    for _ in range(200):  # bounded: a shielded give-back finishes on its own
        freed = [await state.claim("p", "A", 10, T0, SPLIT_O, "ops") for _ in range(11)]
        if [(c.within_share, c.in_org) for c in freed] == expected:
            break
        for claim in freed:
            await state.release(claim)
        await asyncio.sleep(0.05)
    assert [(c.within_share, c.in_org) for c in freed] == expected
