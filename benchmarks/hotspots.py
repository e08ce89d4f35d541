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
  limit → admit → route → relay → settle, and the pipeline's own code between them), or
  to the server, the upstream client, the state client (Redis), the accounting writer
  or other. Each frame, innermost first, takes the first row of ``STAGES`` it matches: a
  regular expression on the frame's file (searched in the path, so ``fairgate/limits/``
  matches wherever the package lives) and one on its function name (a closure or a
  comprehension reads as its enclosing function). A stage's row decides the sample; a
  ``CALLER`` row (helpers every stage calls: the exchange, key names) and a frame no
  row matches pass it to the caller, so ``asyncio.wait_for`` called by the relay is the
  relay's. The ``FALLBACK`` rows (SQLite's thread, a Redis stream's reader, the loop,
  background tasks) count only when no row of ``STAGES`` decided any frame. A sample
  nothing decides, or decided by a module of ``fairgate/proxy/`` no row names, is
  *unmapped*: its share says how far the table is behind the code, and its top
  functions say which rows to add. The rows name modules and functions, not line
  numbers, so a stage moved to a module of its own needs one row.

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

__all__ = [
    "FALLBACK",
    "STAGES",
    "Hotspots",
    "Unavailable",
    "collect",
    "library_of",
    "parse",
    "record",
    "stage_of",
]

# (stage, file pattern, function pattern). Each frame of a sample, innermost first, takes
# the first row it matches: a row of a stage decides the sample; a CALLER row passes it to
# the frame's caller (helpers every stage calls); a frame no row matches is passed on too.
# Function patterns read the name py-spy gives (``Class.method`` or ``function``) without
# a ``.<locals>.…`` tail: a closure or a comprehension is its enclosing function's work.
# Specific rows (a function in a module) come before the module's catch-all row.
CALLER = "caller"
UNMAPPED = "unmapped"
_ANY = r".*"
STAGES: list[tuple[str, str, str]] = [
    # -- the state back end's client: fairgate's script pipe and reply parser, redis-py
    # (what talking to Redis costs, whichever stage asked; counted before the stages' rows)
    ("state client", r"fairgate/state/(scripts|replies|deadline|target)\.py", _ANY),
    (
        "state client",
        r"fairgate/state/redis\.py",
        r"(^|\.)(_call|_wait|_guarded|guarded|_completed|_finished|_drop_idle|client|aclose)$",
    ),
    ("state client", r"(^|/)redis/", _ANY),
    (CALLER, r"fairgate/state/", r"(^|\.)(_key|_\w+_key|_slots_prefix|_escape|_unescape)$"),
    # -- settle: Settler.settle, the record, and the way out of the stages before it
    # (Limit.leave, Admit.leave and Admit.finish, the back ends' settle, release, charge)
    ("route", r"fairgate/proxy/settle\.py", r"(^|\.)(retried|fell_back|attempt_failed)$"),
    ("settle", r"fairgate/proxy/(settle|records)\.py", _ANY),
    ("settle", r"fairgate/proxy/reservation\.py", r"(^|\.)charge$"),
    ("settle", r"fairgate/proxy/limit\.py", r"(^|\.)leave$"),
    (
        "settle",
        r"fairgate/proxy/admit\.py",
        r"(^|\.)(leave|finish|_give_back|_owe|_pay|_usage_charge|_charged_here)$",
    ),
    ("settle", r"fairgate/proxy/dispatch\.py", r"(^|\.)(release|freed|seat_freed)$"),
    ("settle", r"fairgate/admission/", r"(^|\.)(release|_lease_released)$"),
    ("settle", r"fairgate/limits/", r"(^|\.)(settle|_settle\w*|release|refund\w*)$"),
    ("settle", r"fairgate/state/", r"(^|\.)_?(settle|release|charge|unclaim|give_back)\w*$"),
    ("settle", r"fairgate/accounting/(record|queue|cost)\.py", _ANY),
    ("settle", r"fairgate/accounting/recorder\.py", r"(^|\.)(record|_spill_or_drop|_drop)$"),
    ("settle", r"fairgate/accounting/journal\.py", r"(^|\.)(append|encode)$"),
    # -- accounting writer: the recorder's batches to the store (SQLite in aiosqlite's
    # thread: the fallback rows below count that thread's own frames)
    ("accounting writer", r"fairgate/accounting/(recorder|journal|store_writer)\.py", _ANY),
    # -- identify: the network rules, the credential, the key (proxy/identify.py, or the
    # pipeline's own functions before it)
    ("identify", r"fairgate/(auth|tenancy)/", _ANY),
    ("identify", r"fairgate/proxy/identify\.py", _ANY),
    (
        "identify",
        r"fairgate/core/(client_addr|network|address_lists|cidr|route_classes|claims)\.py",
        _ANY,
    ),
    ("identify", r"fairgate/proxy/pipeline\.py", r"(^|\.)(_identify|_scan_headers|_exchanged)$"),
    # -- read: head, endpoint, body, model and request policy, output reservation, salt,
    # tags (proxy/read.py, or the pipeline's own functions before it)
    ("read", r"fairgate/proxy/(read|request|tags|salt)\.py", _ANY),
    ("read", r"fairgate/proxy/pipeline\.py", r"(^|\.)(_read\w*|_check_fields)$"),
    (CALLER, r"fairgate/proxy/(reservation|exchange)\.py", r"(^|\.)Reservation\.\w+$"),
    ("read", r"fairgate/proxy/reservation\.py", _ANY),
    ("read", r"fairgate/proxy/responses\.py", r"(^|\.)check$"),
    ("relay", r"fairgate/proxy/responses\.py", r"(^|\.)(relayed_\w+|_remember)$"),
    ("read", r"fairgate/state/owners\.py", r"(^|\.)owner_of$"),
    ("relay", r"fairgate/state/owners\.py", r"(^|\.)remember$"),
    (
        "relay",
        r"fairgate/proxy/endpoints\.py",
        r"(^|\.)(body_for|headers_for|upstream_target|upstream_path|_usage_in_stream"
        r"|send_json|_list_models|_get_model|_listing)$",
    ),
    (CALLER, r"fairgate/proxy/endpoints\.py", r"(^|\.)endpoint_kind$"),
    ("read", r"fairgate/proxy/endpoints\.py", _ANY),
    ("read", r"fairgate/engines/(output|policy|model_field|path)\.py", _ANY),
    (CALLER, r"fairgate/limits/estimate\.py", _ANY),
    # -- admit: the admission lease, the fair-share claim and usage reads, the dispatcher
    ("admit", r"fairgate/(admission|fairshare)/", _ANY),
    ("admit", r"fairgate/limits/fairshare_state\.py", _ANY),
    ("admit", r"fairgate/proxy/(admit|dispatch)\.py", _ANY),
    (
        "admit",
        r"fairgate/state/",
        r"(^|\.)(claim|_claim\w*|_borrowing|usage|team_usage|in_flight|team_in_flight"
        r"|_in_flight_call|_lease)$",
    ),
    ("admit", r"fairgate/state/board\.py", _ANY),
    # -- limit: the head check, the limiter and its plan, budgets, the counter store
    ("limit", r"fairgate/proxy/limit\.py", _ANY),
    ("limit", r"fairgate/limits/", _ANY),
    ("limit", r"fairgate/state/(memory|redis)\.py", _ANY),
    # -- route: the replica the router picks, its lease and breaker, retries
    ("route", r"fairgate/routing/", _ANY),
    ("route", r"fairgate/proxy/affinity\.py", _ANY),
    ("route", r"fairgate/upstream/(registry|replica|breaker)\.py", _ANY),
    ("route", r"fairgate/core/(breaker|replica)\.py", _ANY),
    ("route", r"fairgate/proxy/forward\.py", r"(^|\.)(forward|_tries|_failed|_answer_failure)$"),
    # -- relay: the attempt (the engine's body and headers) and the answer to the client
    (CALLER, r"fairgate/proxy/usage\.py", r"(^|\.)Usage\.\w+$"),  # also settle's sums
    ("relay", r"fairgate/proxy/(relay|sse|encoding|usage|watchdog|share)\.py", _ANY),
    ("relay", r"fairgate/proxy/forward\.py", _ANY),
    ("relay", r"fairgate/engines/(adapter|body|headers|passthrough|vllm)\.py", _ANY),
    (
        "relay",
        r"fairgate/proxy/pipeline\.py",
        r"(^|\.)(_send_error|_end_at_shutdown|_abort_connection)$",
    ),
    # -- pipeline: Pipeline.handle's own code between the stages (the exchange, the
    # ticket, the request id, the disconnect watch)
    ("pipeline", r"fairgate/proxy/pipeline\.py", _ANY),
    # -- the server: the listener's protocol and uvicorn, the socket writes to the client
    ("server", r"fairgate/(server/|proxy/asgi\.py|core/asgi\.py)", _ANY),
    ("server", r"(^|/)(uvicorn|h11|httptools|starlette|granian)/", _ANY),
    ("server", r"(^|/)aiohttp/web\w*\.py", _ANY),
    ("server", r"(^|/)(minimal_proxy|aiohttp_server)\.py$", _ANY),  # the minimal proxies
    # -- the upstream client: connections, request heads, the socket writes to the engine
    ("upstream client", r"fairgate/upstream/", _ANY),
    ("upstream client", r"(^|/)(aiohttp|httpx|httpcore)/", _ANY),
    ("upstream client", r"(^|/)proxy_clients\.py$", _ANY),  # the minimal proxies' clients
    # -- the request path's own modules: data passed between the stages is its caller's;
    # a module of proxy/ no row above names is unmapped (the table is behind the code)
    (CALLER, r"fairgate/proxy/(exchange|ticket)\.py", _ANY),
    ("relay", r"fairgate/proxy/me\.py", _ANY),  # GET /me, answered by the gateway
    (UNMAPPED, r"fairgate/proxy/", _ANY),
]
# Tried only when no row above decides any frame of the sample: the store outside a stage
# (aiosqlite's thread), a Redis stream's reader, and what runs beside the requests.
FALLBACK: list[tuple[str, str, str]] = [
    ("state client", r"(^|/)asyncio/streams\.py", _ANY),
    ("accounting writer", r"(^|/)(aiosqlite|sqlite3|sqlalchemy|asyncpg|greenlet)/", _ANY),
    ("accounting writer", r"fairgate/store/", _ANY),
    ("other", r"fairgate/", _ANY),  # background tasks, metrics, the loop's own callbacks
    ("other", r"(^|/)(asyncio|uvloop|logging|threading|selectors|concurrent)/", _ANY),
    ("other", r"^(<frozen|<string>|threading|selectors|queue|socket|ssl|_weakrefset)", _ANY),
]
STAGE_ORDER = (
    "identify",
    "read",
    "limit",
    "admit",
    "route",
    "relay",
    "settle",
    "pipeline",
    "server",
    "upstream client",
    "state client",
    "accounting writer",
    "other",
    "unmapped",
)
REQUEST_PATH = STAGE_ORDER[:8]  # the stages a request's own code runs in


def _compiled(
    rows: list[tuple[str, str, str]],
) -> list[tuple[str, re.Pattern[str], re.Pattern[str]]]:
    return [(stage, re.compile(f), re.compile(g)) for stage, f, g in rows]


_STAGED = _compiled(STAGES)
_FALLBACK = _compiled(FALLBACK)


def stage_of(frames: list[tuple[str, str]]) -> str:
    """The stage of one sample (frames outermost first): its innermost frame a row of
    ``STAGES`` decides, else its innermost frame a row of ``FALLBACK`` decides.

    ``asyncio.wait_for`` called by the relay is the relay's; a dataclass ``__init__``
    is its caller's; the loop's own callbacks are "other" only when no stage is above.
    """
    return _decide(frames)[0]


def _decide(frames: list[tuple[str, str]]) -> tuple[str, tuple[str, str]]:
    """The stage and the frame that decided it (the innermost frame when none did)."""
    for rows in (_STAGED, _FALLBACK):
        for frame in reversed(frames):
            func, path = frame
            name = func.split(".<locals>.", 1)[0]
            for stage, file_pattern, func_pattern in rows:
                if file_pattern.search(path) and func_pattern.search(name):
                    if stage != CALLER:
                        return stage, frame
                    break
    return UNMAPPED, frames[-1]


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

    def top_self(self, top: int = 8, us_per_request: float = 0.0) -> str:
        """The ``top`` functions by self time (the innermost frame of each sample)."""
        total = max(self.total, 1)
        lines = [f"top self time ({self.total} samples)"]
        for name, count in self.self_by_function.most_common(top):
            share = count / total
            cost = f"{share * us_per_request:6.1f} µs " if us_per_request else ""
            lines.append(f"  {100 * share:5.1f}%  {cost} {name}")
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
        stage, (where, path) = _decide(inner)
        spots.by_stage[stage] += count
        if stage == UNMAPPED:
            spots.unmapped[f"{library_of(path)}:{where}"] += count
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


class Unavailable(RuntimeError):
    """py-spy is not installed, or could not sample the process (ptrace refused)."""


def record(pid: int, seconds: float, out: Path, rate: int = 250) -> subprocess.Popen[bytes]:
    """Start ``py-spy record`` on ``pid`` for ``seconds`` into ``out`` (raw collapsed stacks).

    ``--nonblocking`` samples without pausing the process (a little less exact, far less
    intrusive); ``--gil`` only the thread running Python. The caller waits for the
    returned process and reads the stacks with ``collect``. ``Unavailable`` when py-spy
    is not installed.
    """
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).is_file():
        raise Unavailable("py-spy is not installed (pip install py-spy; it is in the dev extras)")
    argv = [spy, "record", "--gil", "--nonblocking", "-r", str(rate), "-f", "raw", "-o", str(out)]
    argv += ["-d", str(max(1, round(seconds))), "--pid", str(pid)]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def collect(spy: subprocess.Popen[bytes], out: Path, timeout: float) -> Hotspots:
    """Wait for ``record``'s py-spy and sum what it wrote; ``Unavailable`` with py-spy's
    own last line when it wrote nothing (most often: ptrace refused)."""
    try:
        _, error = spy.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        spy.kill()
        spy.communicate()
        raise Unavailable(f"py-spy did not finish within {timeout:g} s") from None
    if not out.exists() or not out.stat().st_size:
        lines = [line for line in error.decode(errors="replace").splitlines() if line.strip()]
        why = lines[-1].strip() if lines else f"exit status {spy.returncode}"
        hint = " (py-spy needs ptrace: root, or kernel.yama.ptrace_scope 0)"
        raise Unavailable(f"py-spy wrote nothing: {why}" + (hint if spy.returncode else ""))
    return parse(out.read_text())


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
