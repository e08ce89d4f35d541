"""The checked-in gRPC code is what grpcio-tools generates from proto/ today.

The generator stamps its own version into the code (``GRPC_GENERATED_VERSION``, the
protobuf runtime check), and the code refuses to run under an older grpcio or protobuf
than the stamp. So the comparison leaves the stamps out (a newer grpcio-tools makes the
same code from the same proto/), and the checked-in stamps are held to the lower bounds
pyproject.toml declares: every version it allows can import the code.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from fairgate.fleet.generate import ROOT, generate

GENERATED = ("fleet_pb2.py", "fleet_pb2.pyi", "fleet_pb2_grpc.py")
_STAMPS = (
    re.compile(r"^GRPC_GENERATED_VERSION = '[^']*'$", re.MULTILINE),
    re.compile(r"^# Protobuf Python Version: .*$", re.MULTILINE),
    re.compile(r"ValidateProtobufRuntimeVersion\([^)]*\)"),
)
_CHECKED_IN = ROOT / "src" / "fairgate" / "fleet" / "v1"


def _unstamped(text: str) -> str:
    for stamp in _STAMPS:
        text = stamp.sub("<the generator's version>", text)
    return text


def _lower_bound(package: str) -> str:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (bound,) = [d for d in config["project"]["dependencies"] if d.startswith(f"{package}>=")]
    return bound.removeprefix(f"{package}>=")


def test_generated_code_is_current(tmp_path: Path) -> None:
    generate(tmp_path)
    for name in GENERATED:
        fresh = (tmp_path / "fairgate" / "fleet" / "v1" / name).read_text()
        checked_in = (_CHECKED_IN / name).read_text()
        assert _unstamped(fresh) == _unstamped(checked_in), (
            f"src/fairgate/fleet/v1/{name} is stale: run python -m fairgate.fleet.generate"
        )


def test_the_checked_in_code_runs_on_the_oldest_versions_pyproject_allows() -> None:
    grpc_stub = (_CHECKED_IN / "fleet_pb2_grpc.py").read_text()
    assert f"GRPC_GENERATED_VERSION = '{_lower_bound('grpcio')}'" in grpc_stub
    messages = (_CHECKED_IN / "fleet_pb2.py").read_text()
    stamp = re.search(r"ValidateProtobufRuntimeVersion\(([^)]*)\)", messages)
    assert stamp is not None
    major, minor, patch = (int(n) for n in re.findall(r"\b\d+\b", stamp.group(1))[:3])
    oldest = tuple(int(n) for n in _lower_bound("protobuf").split("."))
    assert (major, minor, patch) <= oldest
