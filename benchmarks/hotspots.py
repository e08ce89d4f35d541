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
  share of CPU time spent in it and everything it called;
- **by stage** — each sample goes to one stage of the request path (identify → read →
  limit → admit → route → relay → settle), or to the server, the upstream client, the
  accounting writer or other (the loop, the interpreter), by the innermost frame that
  matches a row of ``STAGES``: a regular expression on the frame's file (searched in the
  path, so ``fairgate/limits/`` matches wherever the package lives) and one on its
  function name. The first matching row wins; the fallback rows (the Redis client's
  own I/O, the loop, asyncio) only when no other row matches any frame. A sample no
  row matches is *unmapped*: its share says how far the table is behind the code, and
  its top functions say which rows to add. The rows name modules and functions, not
  line numbers, so a stage moved to a module of its own needs one row.

``record`` samples only the thread holding the GIL (``--gil``): without it py-spy
counted the store's worker thread (aiosqlite) as busy while it waited in its queue, and
the accounting writer read as 13-17 % of the gateway's CPU; the thread's own CPU time
(``/proc/PID/task/TID/stat``) under the same load was about 1 % of a core. Shares are of
the time a thread held the GIL, which on a loaded machine includes time the process was
preempted (a socket write that wakes the receiver looks expensive then);
``cpu_profile.py`` counts CPU time and calls instead. ``record`` starts py-spy on a
running process (root, or ptrace allowed, is needed).
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

__all__ = ["STAGES", "Hotspots", "library_of", "parse", "record", "stage_of"]

# (stage, file pattern, function pattern), the first match of the innermost matching frame
# wins. Specific rows (a function in a module) before the module's catch-all row.
STAGES: list[tuple[str, str, str]] = [
    # settle: the pipeline's finally, the records, metrics, the limiter's and fair share's
    # give-back (those functions live in the limit/admit modules)
    ("settle", r"fairgate/proxy/(settle|records|reservation)\.py", r".*"),
    ("settle", r"fairgate/proxy/(gate|limit|admit)\w*\.py", r"(^|\.)(leave|_settle\w*)$"),
    ("settle", r"fairgate/limits/", r"(^|\.)(settle|_settle\w*|release|refund\w*)$"),
    ("settle", r"fairgate/state/", r"(^|\.)(settle|release|refund\w*|charge|return\w*)$"),
    ("settle", r"fairgate/accounting/(record|recorder|queue|cost)\.py", r".*"),
    ("settle", r"fairgate/observability/", r".*"),
    ("settle", r"fairgate/proxy/pipeline\.py", r"(^|\.)_?settle\w*$"),
    # accounting writer: the batch to the store, SQLite in aiosqlite's thread
    ("accounting writer", r"fairgate/accounting/", r".*"),
    ("accounting writer", r"(^|/)(aiosqlite|sqlite3|sqlalchemy|asyncpg)/", r".*"),
    # identify: the headers, the key, the network rules
    ("identify", r"fairgate/(auth|tenancy)/", r".*"),
    ("identify", r"fairgate/core/(client_addr|network|address_lists|cidr|principal)\.py", r".*"),
    (
        "identify",
        r"fairgate/proxy/(pipeline|identify)\w*\.py",
        r"(^|\.)(_scan_headers|_authenticate|identify)$",
    ),
    # read: body, model, caps and request policy, reservation estimate, salt, tags
    ("read", r"fairgate/proxy/(request|salt|responses|read)\w*\.py", r".*"),
    ("read", r"fairgate/proxy/pipeline\.py", r"(^|\.)(_read|_check_fields|read\w*)$"),
    ("read", r"fairgate/engines/(body|output|policy|model_field|form|path)\.py", r".*"),
    ("read", r"fairgate/proxy/(routes|endpoints)\.py", r".*"),
    ("read", r"fairgate/proxy/(gate|tags)\w*\.py", r"(^|\.)(parse|TagPolicy\.parse|_subject)$"),
    ("read", r"fairgate/limits/estimate\.py", r".*"),
    ("read", r"(^|/)orjson", r".*"),
    # admit: admission leases and the fair-share claim (state methods by name)
    ("admit", r"fairgate/(admission|fairshare)/", r".*"),
    ("admit", r"fairgate/limits/fairshare_state\.py", r".*"),
    ("admit", r"fairgate/state/", r"(^|\.)(claim|usage|team_usage|in_flight|charge_usage)$"),
    ("admit", r"fairgate/proxy/(admit|dispatch|share)\w*\.py", r".*"),
    (
        "admit",
        r"fairgate/proxy/gate\.py",
        r"(^|\.)(_claim|_dispatch|_ranked|_provisional|_pool_\w+|_cached|_split|_weight|_class|ranks_now)$",
    ),
    # limit: the head check, the limiter, the counter store, budgets
    ("limit", r"fairgate/(limits|state)/", r".*"),
    ("limit", r"fairgate/proxy/(gate|limit)\w*\.py", r".*"),
    # route: choosing a replica
    ("route", r"fairgate/routing/", r".*"),
    ("route", r"fairgate/proxy/(affinity|route)\w*\.py", r".*"),
    ("route", r"fairgate/upstream/(registry|replica|breaker)\.py", r".*"),
    ("route", r"fairgate/core/(breaker|replica)\.py", r".*"),
    ("route", r"fairgate/proxy/pipeline\.py", r"(^|\.)(_forward|route\w*)$"),
    ("route", r"fairgate/proxy/forward\.py", r"(^|\.)(forward|_tries|_failed|_answer_failure)$"),
    # relay: the attempt toward the engine and the answer toward the client
    ("relay", r"fairgate/proxy/(relay|sse|encoding|usage|exchange)\w*\.py", r".*"),
    ("relay", r"fairgate/engines/", r".*"),
    ("relay", r"fairgate/proxy/pipeline\.py", r"(^|\.)(_attempt|_send_error|relay\w*)$"),
    ("relay", r"fairgate/proxy/forward\.py", r".*"),
    # the upstream client (httptools, the socket writes toward the engine)
    ("upstream client", r"fairgate/upstream/", r".*"),
    ("upstream client", r"(^|/)(aiohttp|httpx|httpcore)/", r".*"),
    # the server: uvicorn and the gateway's protocol, the socket writes toward the client
    ("server", r"fairgate/(server|proxy/asgi)", r".*"),
    ("server", r"(^|/)(uvicorn|h11|httptools|starlette)/", r".*"),
    # fallback rows: the Redis client's I/O outside any fairgate frame (its reader)
    ("state client", r"(^|/)redis/|asyncio/streams\.py", r".*"),
    # the pipeline's own frame (handle, glue between the stages)
    ("other", r"fairgate/proxy/pipeline\.py", r".*"),
    ("other", r"(^|/)(asyncio|uvloop|logging|threading|selectors|concurrent)/", r".*"),
    ("other", r"^(<frozen|threading|selectors|queue|socket|ssl)", r".*"),
]
STAGE_ORDER = (
    "identify",
    "read",
    "limit",
    "admit",
    "route",
    "relay",
    "settle",
    "server",
    "upstream client",
    "accounting writer",
    "state client",
    "other",
    "unmapped",
)
_COMPILED = [(stage, re.compile(f), re.compile(g)) for stage, f, g in STAGES]
_FALLBACK = ("state client", "other")
_STAGED = [row for row in _COMPILED if row[0] not in _FALLBACK]
_OTHER = [row for row in _COMPILED if row[0] in _FALLBACK]


def stage_of(frames: list[tuple[str, str]]) -> str:
    """The stage of one sample: its innermost frame that a row of ``STAGES`` matches.

    The "other" rows (the loop, asyncio, the pipeline's own frame) count only when no
    other row matches any frame: ``asyncio.wait_for`` called by the relay is the relay's.
    """
    for rows in (_STAGED, _OTHER):
        for func, path in reversed(frames):
            for stage, file_pattern, func_pattern in rows:
                if file_pattern.search(path) and func_pattern.search(func):
                    return stage
    return "unmapped"


_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^():]+?)(?::\d+)?\)$")
_LOOP = ("Runner.run", "run_until_complete", "run_forever", "run")


@dataclass(slots=True)
class Hotspots:
    """Sample counts (CPU time): total, self time per library, inclusive per function."""

    total: int = 0
    by_library: Counter[str] = field(default_factory=Counter)
    self_by_function: Counter[str] = field(default_factory=Counter)
    by_function: Counter[str] = field(default_factory=Counter)
    by_stage: Counter[str] = field(default_factory=Counter)
    unmapped: Counter[str] = field(default_factory=Counter)  # innermost function

    def stage_table(self, us_per_request: float = 0.0, top_unmapped: int = 5) -> str:
        """CPU per stage of the request path (hotspots.STAGES maps frames to stages)."""
        total = max(self.total, 1)
        lines = ["CPU by stage (innermost frame matching hotspots.STAGES)"]
        for stage in STAGE_ORDER:
            share = self.by_stage.get(stage, 0) / total
            cost = f"{share * us_per_request:7.1f} µs" if us_per_request else ""
            lines.append(f"  {stage:<18} {100 * share:5.1f}% {cost}")
        for name, count in self.unmapped.most_common(top_unmapped):
            lines.append(f"    unmapped: {100 * count / total:4.1f}% {name}")
        return "\n".join(lines)

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
            "by_stage": {
                stage: round(self.by_stage.get(stage, 0) / total, 4) for stage in STAGE_ORDER
            },
            "unmapped_top": shares(self.unmapped),
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
            spots.by_stage["other"] += count
            continue
        stage = stage_of(inner)
        spots.by_stage[stage] += count
        if stage == "unmapped":
            spots.unmapped[f"{library_of(inner[-1][1])}:{inner[-1][0]}"] += count
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
    intrusive); ``--gil`` only the thread running Python. The caller waits for the
    returned process.
    """
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    argv = [spy, "record", "--gil", "--nonblocking", "-r", str(rate), "-f", "raw", "-o", str(out)]
    argv += ["-d", str(max(1, round(seconds))), "--pid", str(pid)]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stacks", type=Path, help="py-spy record -f raw output")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    spots = parse(args.stacks.read_text())
    print(spots.stage_table())
    print(spots.table(args.top))


if __name__ == "__main__":
    main()
