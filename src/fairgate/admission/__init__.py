"""Admission control: between limits and routing, decides *when* a request may go on.

In-process and asyncio-only: no sockets, no store; snapshots and time handed in.

Per pool, over the replicas able to take traffic (C_r = learned batch capacity)::

    saturation = max( (Σ in_flight + pending) / Σ C_r ,                    saturation.py
                      capacity-weighted mean KV usage / kv_limit )
    C_r        = max(initial, high-water mark of running), probing upwards   capacity.py
    admitted   ⇔ saturation < ceiling(band), or ceiling(band) > 1.0          controller.py
    waiters    : bands from the top; in a band, by fair-share priority       queue.py
                 (only with order_by_priority), then keys in turn, then FIFO

``pending`` counts leases granted and not yet dispatched, so a burst cannot
pass one reading together. 1.0 means every batch is full with nothing queued
in an engine.

Worked example: one replica, C = 10, bands platinum 1.5 / gold 1.0 / bronze
0.8, 7 requests in flight, 1 pending. Saturation = 8 / 10 = 0.8: bronze waits
(0.8 is not below 0.8), gold is admitted (pending 2, saturation 0.9), another
gold too (1.0), the next gold waits; platinum always passes. A release brings
saturation back to 0.9 and admits the head of gold's queue before anyone of
bronze.

Errors raised here (``fairgate.core.errors``)::

    GatewayError
    ├── ServiceUnavailable   503  code queue_full      the band's queue holds queue_size
    └── GatewayTimeout       504  code queue_timeout   waited queue_ttl without room
    ValueError                    unknown band, parameters out of range (a caller's bug)
"""

from fairgate.admission.bands import NEVER_HELD_ABOVE, Band, Bands
from fairgate.admission.capacity import (
    DEFAULT_PROBE_FRACTION,
    DEFAULT_RESET_AFTER,
    CapacityTracker,
)
from fairgate.admission.controller import DEFAULT_RECHECK_INTERVAL, AdmissionController, Reading
from fairgate.admission.detector import SaturationDetector
from fairgate.admission.lease import Lease
from fairgate.admission.observer import AdmissionObserver, NullObserver, Rejection
from fairgate.admission.queue import BandQueue, TenantRoundRobin
from fairgate.admission.saturation import DEFAULT_KV_LIMIT, replica_key, saturation

__all__ = [
    "DEFAULT_KV_LIMIT",
    "DEFAULT_PROBE_FRACTION",
    "DEFAULT_RECHECK_INTERVAL",
    "DEFAULT_RESET_AFTER",
    "NEVER_HELD_ABOVE",
    "AdmissionController",
    "AdmissionObserver",
    "Band",
    "BandQueue",
    "Bands",
    "CapacityTracker",
    "Lease",
    "NullObserver",
    "Reading",
    "Rejection",
    "SaturationDetector",
    "TenantRoundRobin",
    "replica_key",
    "saturation",
]
