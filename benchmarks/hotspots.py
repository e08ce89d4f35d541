"""Where a server's CPU goes: py-spy's collapsed stacks summed per library and per function.

    python benchmarks/hotspots.py STACKS.txt [--top 25]

py-spy (``py-spy record -f raw``) writes one line per distinct stack, frames separated
by ``;`` outermost first, then the number of samples. A frame reads
``function (path/to/file.py:line)``. Two views answer "what costs what":

- **self time by library** — the innermost Python frame of each sample, attributed to
  the library its file belongs to (``aiohttp``, ``uvicorn``, ``asyncio``, ``fairgate.proxy``
  …). System calls and C extensions count toward the Python frame that called them
  (a socket write inside aiohttp is aiohttp's); a sample whose innermost Python frame is
  the loop runner itself is time in uvloop's C loop (epoll, callbacks' C parts);
- **inclusive time by function** — every function on the stack, once per sample: the
  share of CPU time spent in it and everything it called.

py-spy leaves out samples where the process sleeps, so shares are of CPU time.
``record`` starts py-spy on a running process (root, or ptrace allowed, is needed).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Hotspots", "library_of", "parse", "record"]

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^():]+?)(?::\d+)?\)$")
_LOOP = ("Runner.run", "run_until_complete", "run_forever", "run")


@dataclass(slots=True)
class Hotspots:
    """Sample counts (CPU time): total, self time per library, inclusive per function."""

    total: int = 0
    by_library: Counter[str] = field(default_factory=Counter)
    self_by_function: Counter[str] = field(default_factory=Counter)
    by_function: Counter[str] = field(default_factory=Counter)

    def table(self, top: int = 20, us_per_request: float = 0.0) -> str:
        """The three views; with ``us_per_request`` (CPU µs per request measured meanwhile)
        each share is also shown as µs per request."""
        total = max(self.total, 1)

        def rows(title: str, counts: Counter[str]) -> list[str]:
            out = [title]
            for name, count in counts.most_common(top):
                share = count / total
                cost = f"{share * us_per_request:6.1f} µs " if us_per_request else ""
                out.append(f"  {100 * share:5.1f}%  {cost} {name}")
            return out

        lines = [f"{self.total} samples of CPU time"]
        lines += rows("self time by library", self.by_library)
        lines += rows("self time by function", self.self_by_function)
        lines += rows("inclusive time by function", self.by_function)
        return "\n".join(lines)

    def to_json(self, top: int = 40) -> dict[str, object]:
        total = max(self.total, 1)

        def shares(counts: Counter[str]) -> dict[str, float]:
            return {k: round(v / total, 4) for k, v in counts.most_common(top)}

        return {
            "samples": self.total,
            "self_by_library": shares(self.by_library),
            "self_by_function": shares(self.self_by_function),
            "inclusive_by_function": shares(self.by_function),
        }


def library_of(path: str) -> str:
    """A frame's library: ``aiohttp``, ``uvicorn``, ``asyncio``, ``fairgate.proxy``, …

    py-spy names files relative to the sys.path entry they came from
    (``aiohttp/client.py``); a bare file name is a script (the benchmarks) or the stdlib.
    """
    parts = Path(path).parts
    if "site-packages" in parts:
        parts = parts[parts.index("site-packages") + 1 :]
    if "fairgate" in parts:
        rest = parts[parts.index("fairgate") + 1 :]
        return "fairgate." + rest[0].removesuffix(".py") if len(rest) > 1 else "fairgate"
    if len(parts) > 1:
        return parts[0]
    return Path(path).stem


def _frames(stack: str) -> list[tuple[str, str]]:
    frames = []
    for frame in stack.split(";"):
        match = _FRAME.match(frame.strip())
        if match:
            frames.append((match["func"], match["file"]))
    return frames


def parse(text: str) -> Hotspots:
    """Sum py-spy raw (collapsed) output."""
    spots = Hotspots()
    for line in text.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        count = int(count_text)
        frames = _frames(stack)
        if not frames:
            continue
        spots.total += count
        runners = [k for k, (f, p) in enumerate(frames) if _is_loop(f, p)]
        inner = frames[runners[-1] + 1 :] if runners else frames
        if not inner:
            spots.by_library["event loop (uvloop, C)"] += count
            continue
        func, path = inner[-1]
        spots.by_library[library_of(path)] += count
        spots.self_by_function[f"{library_of(path)}:{func}"] += count
        # Frames above the loop runner (the script, main(), Runner.run) are in every
        # sample and say nothing: only what runs on the loop is listed.
        for name in {f"{library_of(p)}:{f}" for f, p in inner}:
            spots.by_function[name] += count
    return spots


def _is_loop(func: str, path: str) -> bool:
    return func in _LOOP and library_of(path) in ("asyncio", "uvloop")


def record(pid: int, seconds: float, out: Path, rate: int = 250) -> subprocess.Popen[bytes]:
    """Start ``py-spy record`` on ``pid`` for ``seconds`` into ``out`` (raw collapsed stacks).

    ``--nonblocking`` samples without pausing the process (a little less exact, far less
    intrusive). The caller waits for the returned process.
    """
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    argv = [spy, "record", "--nonblocking", "-r", str(rate), "-f", "raw", "-o", str(out)]
    argv += ["-d", str(max(1, round(seconds))), "--pid", str(pid)]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stacks", type=Path, help="py-spy record -f raw output")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    print(parse(args.stacks.read_text()).table(args.top))


if __name__ == "__main__":
    main()
