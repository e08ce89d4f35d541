"""Fair share across replicas: how full a replica is, and who may still go there.

A fair-share pool of capacity C spreads C over its replicas by weight: each
replica's ``seats`` (:class:`~fairgate.core.replica.ReplicaSnapshot`). The
engine's priority queue orders only what that engine holds, so the
reservations hold pool-wide only if routing places requests where they can
start:

- a **within-share** request needs a replica whose within-share requests do
  not already fill its seats. There it finds a free seat, or a borrower it
  outranks and whose seat it gets next. Counting only *free* seats or
  *outranked* borrowers is not enough: an organisation's own borrowers are
  outranked too, so its within-share requests would still pile onto its home
  replica's seats while another replica runs borrowers;
- a **borrower** goes where it displaces nothing: a replica with a free seat.
  When no replica has one, it waits in some engine's queue, where the engine
  orders it by its rank; that order holds pool-wide only if every engine's
  queue holds the pool's borrowers, so it goes where this gateway's borrowers
  per seat are fewest. Left to affinity, each organisation's borrowers would
  queue at its own home, and each engine would give its freed seats to one
  organisation's borrowers whatever their rank. (Queuing every borrower at one
  engine would leave the other engines' within-share seats whole, but it
  strands a burst there while the other engines, with no new arrivals, idle.)

The arithmetic, with every count this gateway's own except the engine's
scraped ``running + waiting``:

    occupancy(r)     = max(in_flight, running + waiting)     requests on r, any gateway's
    within_room(r)   = seats − within_share                  > 0: a within-share request fits
    borrower_room(r) = seats − occupancy(r)                  > 0: a borrower displaces nothing
    free_seats(rs)   = Σ max(0, borrower_room(r))            what a pool can still start
    borrower_load(r) = borrowing / seats                     no free seat anywhere: the least

A replica outside fair share (``seats`` None) has unbounded room: the rule
never steers requests away from it nor toward it.

Worked example: pool C = 16 on replicas e1 and e2 (weight 1 each: 8 seats each).
Organisation A (reservation 12) homes on e1, B (reservation 4) on e2.

    e1: in_flight 10 (within 8, borrowing 2), engine running 8 + waiting 3
    e2: in_flight  6 (within 3, borrowing 3), engine running 6 + waiting 0

    occupancy      e1 max(10, 11) = 11     e2 max(6, 6) = 6
    within_room    e1 8 − 8 = 0            e2 8 − 3 = 5
    borrower_room  e1 8 − 11 = −3          e2 8 − 6 = 2
    free_seats     max(0, −3) + max(0, 2) = 2

A's next within-share request goes to e2 even though its prompt's home is e1
(e1's eight seats are all promised to within-share requests already), and so
does a borrower (e2 has two free seats). Once e2 fills too (say 5 within-share
and 5 borrowers), a borrower goes where borrowers per seat are fewest:
e1 2 / 8 = 0.25 against e2 5 / 8 = 0.625, so e1, where it queues behind A's
within-share requests and beside two borrowers the engine orders by rank.

Pure: no I/O, no state; O(1) per replica.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from fairgate.core.replica import ReplicaSnapshot

__all__ = [
    "borrower_load",
    "borrower_room",
    "fits",
    "fits_borrower",
    "fits_within_share",
    "free_seats",
    "occupancy",
    "within_room",
]


def occupancy(replica: ReplicaSnapshot) -> float:
    """The requests on ``replica``: the larger of this gateway's in-flight count and
    the engine's scraped ``running + waiting`` (other gateways' requests show only
    there; a metric that is unknown counts as 0).

    >>> occupancy(ReplicaSnapshot("e1", "m", in_flight=10, running=8.0, waiting=3.0))
    11.0
    """
    engine = (replica.running or 0.0) + (replica.waiting or 0.0)
    return float(max(replica.in_flight, engine))


def within_room(replica: ReplicaSnapshot) -> float:
    """Seats not yet taken by this gateway's within-share requests (``inf`` outside
    fair share); a within-share request fits while this is above 0.

    >>> within_room(ReplicaSnapshot("e1", "m", within_share=8, seats=8.0))
    0.0
    """
    if replica.seats is None:
        return math.inf
    return replica.seats - replica.within_share


def borrower_room(replica: ReplicaSnapshot) -> float:
    """Free seats: ``seats − occupancy`` (``inf`` outside fair share; negative when
    requests queue); a borrower displaces nothing while this is above 0.

    >>> borrower_room(ReplicaSnapshot("e2", "m", in_flight=6, running=6.0, seats=8.0))
    2.0
    """
    if replica.seats is None:
        return math.inf
    return replica.seats - occupancy(replica)


def borrower_load(replica: ReplicaSnapshot) -> float:
    """This gateway's borrowers on ``replica`` per seat (0 outside fair share): where a
    borrower queues when no replica has a free seat, the lowest first.

    >>> borrower_load(ReplicaSnapshot("e1", "m", borrowing=2, seats=8.0))
    0.25
    """
    if replica.seats is None or replica.seats <= 0:
        return 0.0
    return replica.borrowing / replica.seats


def fits_within_share(replica: ReplicaSnapshot) -> bool:
    """Can a within-share request start soon on ``replica``? (``within_room > 0``)"""
    return within_room(replica) > 0


def fits_borrower(replica: ReplicaSnapshot) -> bool:
    """Does a borrower displace nothing on ``replica``? (``borrower_room > 0``)"""
    return borrower_room(replica) > 0


def fits(replica: ReplicaSnapshot, within_share: bool | None) -> bool:
    """The rule for a request admitted ``within_share`` (True), borrowing (False) or
    outside fair share (None: every replica fits)."""
    if within_share is None:
        return True
    return fits_within_share(replica) if within_share else fits_borrower(replica)


def free_seats(replicas: Iterable[ReplicaSnapshot]) -> float:
    """Seats free across ``replicas`` (each replica's positive ``borrower_room``), the
    borrowers a pool can start now without displacing anything; replicas outside
    fair share are not counted.

    >>> free_seats([ReplicaSnapshot("e1", "m", in_flight=11, seats=8.0),
    ...             ReplicaSnapshot("e2", "m", in_flight=6, seats=8.0)])
    2.0
    """
    return float(sum(max(0.0, borrower_room(r)) for r in replicas if r.seats is not None))
