"""The checked-in gRPC code is what grpcio-tools generates from proto/ today."""

from __future__ import annotations

from pathlib import Path

from fairgate.fleet.generate import ROOT, generate

GENERATED = ("fleet_pb2.py", "fleet_pb2.pyi", "fleet_pb2_grpc.py")


def test_generated_code_is_current(tmp_path: Path) -> None:
    generate(tmp_path)
    for name in GENERATED:
        fresh = (tmp_path / "fairgate" / "fleet" / "v1" / name).read_text()
        checked_in = (ROOT / "src" / "fairgate" / "fleet" / "v1" / name).read_text()
        assert fresh == checked_in, (
            f"src/fairgate/fleet/v1/{name} is stale: run python -m fairgate.fleet.generate"
        )
