"""Instructions per request on the full path, counted by valgrind: a figure the load of
the machine does not move.

    python benchmarks/instructions.py [--state memory|redis] [--requests 300 1300]
                                      [--stream N] [--src DIR ...]

Why: on a shared machine the CPU time of the same code moves by a third from one run
to the next (``cpu_profile.py`` measured 1,058–1,470 µs a request for one tree, minutes
apart), so a change of a few per cent cannot be told from the noise by timing.
``valgrind --tool=callgrind`` counts the instructions the process executes instead:
repeatable for the same code, inputs and environment, whatever else the machine runs.

How: ``cpu_profile.py`` (the gateway in this process, its ASGI application called
directly, the benchmark's full configuration, two instant upstreams; for ``redis`` a
private redis-server, whose own instructions are not counted) runs under callgrind
twice per tree, with a small and a large number of requests; the difference of the
two totals over the difference of the requests is what one request costs, start-up
and warm-up cancelled out. Each ``--src`` is a tree's ``src`` directory (default: this
checkout's), measured in the order given; printed per tree: instructions per request
and the ratio to the first tree. Under callgrind a request takes ~50 times its time,
so the time-driven work in the background (health checks, the change feed, the
recorder's flushes) weighs a little more per request than in a real run; the same for
every tree. Takes ~5 minutes per run of 1,300 requests on a 2-core machine.
``--stream N`` measures streams of N content events instead of plain requests (sent
without a gap between events: the relay's work, not its waiting); a stream costs far
more than a plain request, so fewer (``--requests 100 400``) are enough.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def count(src: Path, state: str, requests: int, workdir: Path, stream: int = 0) -> tuple[int, int]:
    """(instructions, requests served) of one ``cpu_profile.py`` run under callgrind."""
    out = workdir / f"callgrind.{os.getpid()}.{requests}.out"
    env = {**os.environ, "PYTHONPATH": str(src)}
    command = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        sys.executable,
        str(HERE / "cpu_profile.py"),
        "--requests",
        str(requests),
        "--state",
        state,
    ]
    if stream:
        command += ["--stream", str(stream), "--gap", "0"]
    run = subprocess.run(command, cwd=HERE, env=env, capture_output=True, text=True, check=False)
    served = re.search(r"^(\d+) requests", run.stdout, re.MULTILINE)
    if run.returncode != 0 or served is None:
        raise SystemExit(f"cpu_profile.py failed under valgrind ({src}):\n{run.stderr[-2000:]}")
    total = re.search(r"^summary: (\d+)", out.read_text(), re.MULTILINE)
    if total is None:
        raise SystemExit(f"callgrind wrote no summary line to {out}")
    out.unlink()
    return int(total.group(1)), int(served.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state", choices=("memory", "redis"), default="memory")
    parser.add_argument(
        "--requests", type=int, nargs=2, default=(300, 1300), metavar=("SMALL", "LARGE")
    )
    parser.add_argument(
        "--stream", type=int, default=0, metavar="N", help="streams of N events, not plain requests"
    )
    parser.add_argument(
        "--src", type=Path, nargs="+", default=[HERE.parent / "src"], help="trees to measure"
    )
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    small, large = sorted(args.requests)
    if small >= large:
        raise SystemExit("--requests needs two different counts")
    first = None
    with tempfile.TemporaryDirectory(prefix="fairgate-instructions-") as tmp:
        for src in args.src:
            low, low_served = count(src.resolve(), args.state, small, Path(tmp), args.stream)
            high, high_served = count(src.resolve(), args.state, large, Path(tmp), args.stream)
            per = (high - low) / (high_served - low_served)
            first = first or per
            print(
                f"{src}: {per:,.0f} instructions a {'stream' if args.stream else 'request'} "
                f"({args.state} state; "
                f"{high_served - low_served} requests apart), {per / first:.3f}x the first"
            )
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
