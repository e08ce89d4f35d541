"""The package's public names."""

from __future__ import annotations

import fairgate.sim


def test_exported_names() -> None:
    assert sorted(fairgate.sim.__all__) == [
        "FaultSettings",
        "READY_PREFIX",
        "ServerProcess",
        "SimApp",
        "SimConfig",
        "SimProcess",
        "serve",
    ]
    for name in fairgate.sim.__all__:
        assert getattr(fairgate.sim, name) is not None
