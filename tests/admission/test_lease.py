"""Leases: granted, dispatched, released; each step counted once by its controller."""

from __future__ import annotations

from fairgate.admission import AdmissionController

from .conftest import PoolLoad, admit_now


async def test_a_lease_released_before_dispatch_leaves_the_pending_count(
    controller: AdmissionController,
) -> None:
    with admit_now(controller.admit(band="gold", tenant="k")) as lease:
        assert controller.pending == 1
    assert lease.released and controller.pending == 0 and controller.leases == 0
    lease.release()
    lease.dispatched()
    assert controller.pending == 0 and controller.leases == 0


async def test_dispatch_moves_a_lease_from_pending_to_in_flight(
    controller: AdmissionController, load: PoolLoad
) -> None:
    lease = admit_now(controller.admit(band="gold", tenant="k"))
    load.start(lease)
    load.start(lease)  # idempotent on the controller's side
    assert controller.pending == 0 and controller.leases == 1 and not lease.pending
    lease.release()
    assert controller.leases == 0


async def test_a_lease_says_what_it_was_granted_for(controller: AdmissionController) -> None:
    lease = admit_now(controller.admit(band="bronze", tenant="key-7", priority=11, cost_hint=2))
    assert (lease.band.name, lease.tenant, lease.priority, lease.cost) == ("bronze", "key-7", 11, 2)
    assert repr(lease) == "Lease(bronze, 'key-7', priority=11, granted)"
    lease.release()
    assert repr(lease).endswith("released)")
