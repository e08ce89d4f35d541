"""The fair-share arithmetic of routing: occupancy, room for a within-share request and
for a borrower, and the free seats of a pool."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from fairgate.core.replica import ReplicaSnapshot
from fairgate.routing.share import (
    borrower_load,
    borrower_room,
    fits,
    fits_borrower,
    fits_within_share,
    free_seats,
    occupancy,
    within_room,
)

from .replicas import replica


def test_the_worked_example_of_the_module() -> None:
    e1 = replica(
        "e1", in_flight=10, within_share=8, borrowing=2, running=8.0, waiting=3.0, seats=8.0
    )
    e2 = replica(
        "e2", in_flight=6, within_share=3, borrowing=3, running=6.0, waiting=0.0, seats=8.0
    )
    assert (occupancy(e1), occupancy(e2)) == (11.0, 6.0)
    assert (within_room(e1), within_room(e2)) == (0.0, 5.0)
    assert (borrower_room(e1), borrower_room(e2)) == (-3.0, 2.0)
    assert free_seats([e1, e2]) == 2.0
    # A's within-share request: e1's seats are all promised, e2 has room.
    assert not fits_within_share(e1) and fits_within_share(e2)
    assert not fits_borrower(e1) and fits_borrower(e2)
    # e2 full too (5 within-share, 5 borrowers): a borrower queues where there are fewer
    # borrowers per seat.
    e2 = replica("e2", in_flight=10, within_share=5, borrowing=5, seats=8.0)
    assert not fits_borrower(e2)
    assert (borrower_load(e1), borrower_load(e2)) == (0.25, 0.625)


def test_occupancy_sees_other_gateways_only_through_the_engine() -> None:
    # This gateway has 2 requests there, the engine reports 7 running and 3 waiting.
    busy = replica("a", in_flight=2, running=7.0, waiting=3.0, seats=8.0)
    assert occupancy(busy) == 10.0
    assert not fits_borrower(busy)
    # Metrics not yet scraped (or stale): the gateway's own count is what is known.
    unknown = replica("b", in_flight=5, seats=8.0)
    assert occupancy(unknown) == 5.0
    assert borrower_room(unknown) == 3.0
    # A stale scrape below the gateway's own count does not hide its requests.
    lagging = replica("c", in_flight=9, running=4.0, waiting=0.0, seats=8.0)
    assert occupancy(lagging) == 9.0


def test_a_within_share_request_fits_while_within_share_requests_leave_a_seat() -> None:
    # Full of this organisation's own borrowers: the within-share request outranks them.
    borrowers = replica("a", in_flight=8, within_share=0, borrowing=8, running=8.0, seats=8.0)
    assert fits_within_share(borrowers)
    assert fits(borrowers, True) and not fits(borrowers, False)
    # Every seat already promised to a within-share request: it would queue behind them.
    promised = replica("b", in_flight=8, within_share=8, running=8.0, seats=8.0)
    assert not fits_within_share(promised)
    assert not fits(promised, True)


def test_fractional_seats_admit_up_to_the_next_whole_request() -> None:
    # C = 16 over three replicas: 5.33 seats each; six within-share requests fit on each,
    # so the pool's 16 within-share requests always find a replica.
    third = 16 / 3
    assert fits_within_share(replica("a", within_share=5, seats=third))
    assert not fits_within_share(replica("a", within_share=6, seats=third))


def test_outside_fair_share_every_replica_fits() -> None:
    plain = replica("a", in_flight=500, running=400.0, waiting=100.0, within_share=50)
    assert within_room(plain) == math.inf and borrower_room(plain) == math.inf
    assert fits(plain, True) and fits(plain, False) and fits(plain, None)
    assert free_seats([plain]) == 0.0  # not a fair-share replica: no seats to count
    assert borrower_load(plain) == 0.0
    # A request outside fair share fits anywhere, even on a full fair-share replica.
    assert fits(replica("b", in_flight=20, within_share=20, seats=8.0), None)


counts = st.integers(min_value=0, max_value=64)
metric = st.one_of(st.none(), st.floats(min_value=0, max_value=64, allow_nan=False))


@settings(max_examples=200, deadline=None)
@given(
    within=counts,
    borrowing=counts,
    extra=counts,
    running=metric,
    waiting=metric,
    seats=st.floats(min_value=0.5, max_value=64),
)
def test_rooms_agree_with_their_definitions(
    within: int,
    borrowing: int,
    extra: int,
    running: float | None,
    waiting: float | None,
    seats: float,
) -> None:
    r = ReplicaSnapshot(
        "a",
        "m",
        in_flight=within + borrowing + extra,
        within_share=within,
        borrowing=borrowing,
        running=running,
        waiting=waiting,
        seats=seats,
    )
    assert occupancy(r) >= r.in_flight
    assert occupancy(r) >= (running or 0) + (waiting or 0)
    assert fits_within_share(r) == (within < seats)
    assert fits_borrower(r) == (occupancy(r) < seats)
    # A borrower never fits where a within-share request does not: its own count is in
    # the occupancy.
    if fits_borrower(r):
        assert fits_within_share(r)
    assert free_seats([r, r]) == 2 * max(0.0, seats - occupancy(r))
