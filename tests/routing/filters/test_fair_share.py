"""The ``fair-share`` filter: within-share requests go where their seats are free, borrowers
where they displace nothing, affinity chooses among those, and nothing is ever refused."""

from __future__ import annotations

import random

from fairgate.core.replica import ReplicaSnapshot
from fairgate.routing import (
    PrefixIndex,
    RequestFeatures,
    RoutingState,
    build_filter,
    build_strategy,
    prefix_hashes,
    preset,
    route,
    with_fair_share,
)
from fairgate.routing.filters import FairShareFilter

from ..replicas import MODEL, replica

RULE = FairShareFilter()
WITHIN = RequestFeatures(MODEL, within_share=True)
BORROWER = RequestFeatures(MODEL, within_share=False)
OUTSIDE = RequestFeatures(MODEL)


def _names(kept: list[ReplicaSnapshot]) -> list[str]:
    return [r.name for r in kept]


def test_a_within_share_request_skips_a_replica_whose_seats_are_all_promised() -> None:
    # e1 runs 8 within-share requests of its own gateway (its 8 seats); e2 runs 3 and 3
    # borrowers. Outranking e1's borrowers would not help: there are none to outrank.
    e1 = replica("e1", in_flight=10, within_share=8, borrowing=2, seats=8.0)
    e2 = replica("e2", in_flight=6, within_share=3, borrowing=3, seats=8.0)
    assert _names(RULE.filter([e1, e2], WITHIN)) == ["e2"]
    assert _names(RULE.filter([e1, e2], BORROWER)) == ["e2"]
    assert _names(RULE.filter([e1, e2], OUTSIDE)) == ["e1", "e2"]


def test_a_within_share_request_may_go_where_only_borrowers_hold_the_seats() -> None:
    # Full of borrowers (its own organisation's or another's): it outranks them all.
    e1 = replica("e1", in_flight=8, borrowing=8, running=8.0, seats=8.0)
    e2 = replica("e2", in_flight=8, within_share=8, running=8.0, seats=8.0)
    assert _names(RULE.filter([e1, e2], WITHIN)) == ["e1"]
    # A borrower has no free seat anywhere: it queues where borrowers per seat are fewest.
    assert _names(RULE.filter([e1, e2], BORROWER)) == ["e2"]


def test_without_a_free_seat_borrowers_spread_over_the_engines_queues() -> None:
    # Both engines full; left to affinity, each organisation's borrowers would queue at
    # its home and each engine would hand its freed seats to one organisation.
    e1 = replica("e1", in_flight=14, within_share=8, borrowing=6, running=8.0, seats=8.0)
    e2 = replica("e2", in_flight=12, within_share=8, borrowing=4, running=8.0, seats=8.0)
    assert _names(RULE.filter([e1, e2], BORROWER)) == ["e2"]
    # Equal: both kept, affinity chooses.
    e2 = replica("e2", in_flight=14, within_share=8, borrowing=6, running=8.0, seats=8.0)
    assert _names(RULE.filter([e1, e2], BORROWER)) == ["e1", "e2"]
    # Per seat: a replica with twice the seats takes twice the borrowers.
    big = replica("big", in_flight=26, within_share=16, borrowing=10, seats=16.0)
    assert _names(RULE.filter([e1, big], BORROWER)) == ["big"]  # 10/16 < 6/8
    # A within-share request with no room anywhere is not steered at all.
    full = replica("f", in_flight=9, within_share=9, borrowing=0, seats=8.0)
    assert _names(RULE.filter([e1, full], WITHIN)) == ["e1", "f"]


def test_borrowers_see_other_gateways_through_the_engines_metrics() -> None:
    # This gateway has 2 requests on e1, but the engine reports 9 running and queued.
    e1 = replica("e1", in_flight=2, borrowing=2, running=8.0, waiting=1.0, seats=8.0)
    e2 = replica("e2", in_flight=5, borrowing=5, running=5.0, waiting=0.0, seats=8.0)
    assert _names(RULE.filter([e1, e2], BORROWER)) == ["e2"]


def test_no_replica_with_room_keeps_them_all() -> None:
    full = [replica(n, in_flight=9, within_share=9, running=8.0, seats=8.0) for n in "ab"]
    assert RULE.filter(full, WITHIN) == full
    assert RULE.filter(full, BORROWER) == full  # no borrower on either: equal
    assert RULE.filter([], WITHIN) == []
    assert build_filter("fair-share") == RULE


def test_replicas_outside_fair_share_always_pass() -> None:
    plain = replica("p", in_flight=40, within_share=40, borrowing=30)
    seated = replica("s", in_flight=9, within_share=9, seats=8.0)
    assert _names(RULE.filter([plain, seated], WITHIN)) == ["p"]
    assert _names(RULE.filter([plain, seated], BORROWER)) == ["p"]


def test_affinity_yields_to_the_rule_and_chooses_among_the_replicas_that_pass() -> None:
    strategy = preset("chat")
    index = PrefixIndex(64)
    system = "You are organisation A's assistant. " * 30
    hashes = prefix_hashes(system + "question", 256, 16)
    index.record("e1", hashes)  # A's system prompt is cached on e1: its home
    state = RoutingState(0, index)
    rng = random.Random(0)
    e1 = replica("e1", in_flight=8, within_share=6, borrowing=2, seats=8.0)
    e2 = replica("e2", in_flight=8, within_share=2, borrowing=6, seats=8.0)
    e3 = replica("e3", in_flight=8, within_share=8, seats=8.0)
    fleet = [e1, e2, e3]
    # Seats left on the home: affinity keeps the request there.
    at_home = route(strategy, fleet, RequestFeatures(MODEL, "A", hashes, True), rng, state)
    assert at_home.replica == "e1" and at_home.dropped_by("fair-share") == ("e3",)
    # The home's seats all promised: the request leaves it, and the rationale says why.
    e1 = replica("e1", in_flight=8, within_share=8, seats=8.0)
    moved = route(strategy, [e1, e2, e3], RequestFeatures(MODEL, "A", hashes, True), rng, state)
    assert moved.replica == "e2"
    assert moved.dropped_by("fair-share") == ("e1", "e3")
    # Outside fair share (or with the rule off), affinity alone decides: home.
    plain = route(strategy, [e1, e2, e3], RequestFeatures(MODEL, "A", hashes), rng, state)
    assert plain.replica == "e1" and plain.dropped_by("fair-share") == ()


def _place(
    within: bool | None, homes_for: dict[str, str], order: list[str], seats: float = 8.0
) -> dict[str, dict[str, int]]:
    """Route ``order`` (organisation names) one after the other, each staying in flight, on
    two replicas; each organisation's prompt is cached on its home. Returns the
    within-share count per replica and organisation."""
    strategy = preset("chat")
    index = PrefixIndex(64)
    hashes = {}
    for org, home in homes_for.items():
        hashes[org] = prefix_hashes(f"System prompt of {org}. " * 40, 256, 16)
        index.record(home, hashes[org])
    state = RoutingState(0, index)
    counts = {"e1": {"A": 0, "B": 0}, "e2": {"A": 0, "B": 0}}
    rng = random.Random(1)
    for org in order:
        fleet = [
            replica(
                name,
                in_flight=sum(by_org.values()),
                within_share=sum(by_org.values()),
                seats=seats,
            )
            for name, by_org in counts.items()
        ]
        features = RequestFeatures(MODEL, f"key-{org}", hashes[org], within)
        chosen = route(strategy, fleet, features, rng, state).replica
        assert chosen is not None
        counts[chosen][org] += 1
    return counts


def test_homes_apart_the_pools_within_share_requests_fill_both_engines_seats() -> None:
    # C = 16 on two engines of 8 seats, A reserves 12, B 4; A homes on e1, B on e2.
    order = ["A"] * 12 + ["B"] * 4
    homes = {"A": "e1", "B": "e2"}
    with_rule = _place(True, homes, order)
    assert sum(with_rule["e1"].values()) == 8
    assert sum(with_rule["e2"].values()) == 8
    assert with_rule["e2"]["B"] == 4  # B stays home: its engine has room for it
    # Without the rule A piles its 12 within-share requests onto its home's 8 seats.
    without = _place(None, homes, order)
    assert without["e1"]["A"] > 8


def test_with_fair_share_appends_the_filter_once() -> None:
    tuned = build_strategy("t", {"filters": ["healthy", "kv-ceiling"], "scorers": {"weight": 1}})
    assert with_fair_share(tuned).filter_names == ("healthy", "kv-ceiling", "fair-share")
    assert with_fair_share(preset("chat")) is not None
    chat = preset("chat")
    assert with_fair_share(chat) is chat  # the presets have it already


def test_a_burst_of_borrowers_keeps_every_engine_s_queue_fed() -> None:
    # Both engines' seats promised to within-share requests, the burst's prompt cached
    # on e1: forty borrowers in a row split evenly, so neither engine idles while the
    # other holds the whole burst.
    strategy = preset("chat")
    index = PrefixIndex(64)
    hashes = prefix_hashes("A batch job's instructions. " * 40, 256, 16)
    index.record("e1", hashes)
    state = RoutingState(0, index)
    borrowing = {"e1": 0, "e2": 0}
    rng = random.Random(2)
    for _ in range(40):
        fleet = [
            replica(n, in_flight=8 + b, within_share=8, borrowing=b, running=8.0, seats=8.0)
            for n, b in borrowing.items()
        ]
        chosen = route(strategy, fleet, RequestFeatures(MODEL, "key", hashes, False), rng, state)
        assert chosen.replica is not None
        borrowing[chosen.replica] += 1
    assert borrowing == {"e1": 20, "e2": 20}
