"""Regenerate `fleet/v1/` from `proto/` with grpcio-tools (a development dependency).

    python -m fairgate.fleet.generate [OUT_DIR]

OUT_DIR defaults to the package's own `src`; the test passes a temporary directory
and compares.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PROTO = ROOT / "proto"
SOURCE = PROTO / "fairgate" / "fleet" / "v1" / "fleet.proto"


def generate(out: Path) -> None:
    from grpc_tools import protoc

    out.mkdir(parents=True, exist_ok=True)
    code = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{PROTO}",
            f"--python_out={out}",
            f"--pyi_out={out}",
            f"--grpc_python_out={out}",
            str(SOURCE),
        ]
    )
    if code != 0:
        raise SystemExit(f"protoc failed with status {code}")


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "src")
