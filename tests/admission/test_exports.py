"""The public names of fairgate.admission."""

from __future__ import annotations

import fairgate.admission as admission


def test_exported_members() -> None:
    assert set(admission.__all__) == {
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
    }
    for name in admission.__all__:
        assert hasattr(admission, name)
