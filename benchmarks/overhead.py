"""fairgate's overhead benchmark: the gateway against a minimal proxy and a direct call.

    python benchmarks/overhead.py [all|latency|throughput|streaming|stacks|profile] [options]

- ``latency``: N interleaved rounds on one keep-alive client (direct, minimal proxy,
  gateway); p50/p99 of each leg and of the latency each proxy adds; ratios to the
  minimal proxy's.
- ``throughput``: C keep-alive connections for T seconds per leg; req/s, ratio, CPU µs
  per request of each server process.
- ``streaming``: a burst of B streams, then S concurrent streams through the gateway
  (on the path and state(s) ``--path``/``--state`` name; the full path in front of two
  simulated engines) and the minimal proxy (in front of one), at a finite token rate,
  all checked complete; then K streams dropped mid-way by the client, and the engines'
  running count must fall back to 0.
- ``stacks``: latency and throughput of the minimal proxy on each server/client stack
  (the measurement behind the gateway's choice of layers).
- ``profile``: each proxy alone under the throughput load, sampled by py-spy; CPU time
  per library and per function (what costs what).
- ``all`` (default): latency, throughput, a short profile of each gateway configuration
  (its CPU by stage and top functions, py-spy sampling ``--profile-duration`` seconds
  under the throughput load; 0 skips it) and streaming, then the verdict against the
  targets of PRODUCT.md §2 and issue #12, per configuration, each missed one with the
  stages its profile puts first.

The gateway runs ``--path full`` (default: what operators run, every stage working and
none binding; see targets.FULL_CONFIG) or ``--path bare`` (one replica, a key without
limits), on ``--state memory``, ``redis`` (a private redis-server this run starts) or
``both`` (two gateway legs in the same run). Every run also measures the minimal proxy
on the gateway's own upstream client (the *lean floor*); ``--compare URL`` adds any other
gateway as a leg. On Redis a short phase of its own counts round trips and commands per
request (benchmarks/roundtrips.py). ``--workers N`` adds gateways of 2..N workers on
Redis (``serve --workers``) as legs and prints their table: req/s, CPU per request of the
gateway and of Redis, how many processes were busy, and what one Redis core would carry.
Any answer other than 200 on any leg fails the run.

Every run prints the machine, the library versions and the command line; ``--json
[FILE]`` writes the same as JSON (to stdout without FILE, the tables then go to stderr).
docs/benchmarks.md explains the method and how to read the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TextIO

import redis
import uvloop

import hotspots
import report
import roundtrips
import targets
from latency import measure_latency
from machine import describe, load_average, raise_fd_limit
from services import Group, RedisServer, Remote, Service, ServiceError
from streaming import measure_streaming
from targets import Endpoint
from throughput import Meter, measure_throughput

BODY = (
    b'{"model":"sim-model","messages":[{"role":"user","content":"Say hello."}],'
    b'"max_tokens":1,"temperature":0}'
)
MODES = ("all", "latency", "throughput", "streaming", "stacks", "profile")
PROFILE_TOP = 8  # mode all: the functions listed under each configuration's stages


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="overhead.py",
        description="fairgate overhead benchmark (docs/benchmarks.md)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add = parser.add_argument
    add("mode", nargs="?", choices=MODES, default="all")
    add("--pairs", type=int, default=2000, help="latency: measured rounds")
    add("--warmup", type=int, default=200, help="latency: rounds discarded first")
    add("--concurrency", "-c", type=int, default=32, help="throughput: connections")
    add("--duration", type=float, default=10.0, help="throughput: seconds per leg")
    add("--segments", type=int, default=5, help="throughput: turns the legs take")
    add("--streams", type=int, default=1000, help="streaming: concurrent streams")
    add("--stream-tokens", type=int, default=16, help="streaming: tokens per stream")
    add(
        "--stream-rounds",
        type=int,
        default=3,
        help="streaming: rounds of --streams streams per proxy, the proxies taking turns; "
        "counts and CPU per token are summed over them",
    )
    add("--token-rate", type=float, default=5.0, help="streaming: sim tokens/s per stream")
    add("--disconnects", type=int, default=100, help="streaming: streams dropped mid-way")
    add("--burst", type=int, default=200, help="streaming: streams sent at once (0: none)")
    add(
        "--upstream",
        choices=["instant", "sim"],
        default="instant",
        help="latency/throughput upstream: the lean instant one or `fairgate sim --speed 0`",
    )
    add(
        "--stack",
        choices=targets.STACKS,
        default=targets.YARDSTICK,
        help="the minimal proxy's server+client stack (the yardstick)",
    )
    add("--stacks", default=",".join(targets.STACKS), help="stacks mode: which, comma-separated")
    add("--without-gateway", action="store_true", help="measure the minimal proxy only")
    add(
        "--path",
        choices=["full", "bare"],
        default="full",
        help="the gateway's configuration: what operators run, or the lightest path",
    )
    add(
        "--state",
        choices=["memory", "redis", "both"],
        default="memory",
        help="the gateway's state back end (both: one gateway leg each, same run)",
    )
    add(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="throughput: also gateways of 2..N workers (`serve --workers`, on Redis), one "
        "leg each, with CPU per request of the gateway and of Redis and the busy processes",
    )
    add("--gateway-config", type=Path, help="YAML template; {upstream}, {state} replaced")
    add("--api-key", default="", help="bearer key for the gateway legs")
    add(
        "--compare",
        action="append",
        default=[],
        metavar="URL",
        help="another gateway measured as a leg (serving sim-model from the benchmark's "
        "upstream, see --upstream-port); repeatable",
    )
    add(
        "--compare-auth",
        action="append",
        default=[],
        metavar="VALUE",
        help="Authorization for --compare: 'Bearer sk-…' or a bare key; one for all or one each",
    )
    add("--upstream-port", type=int, default=0, help="port of the (first) instant upstream")
    add("--count-requests", type=int, default=200, help="redis: requests of the counting phase")
    add("--count-idle", type=float, default=2.0, help="redis: seconds of idle background count")
    add("--repeat", type=int, default=1, help="repeat the measurements in the same processes")
    add("--top", type=int, default=25, help="profile: lines per table")
    add(
        "--profile-duration",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="all: py-spy samples each gateway configuration this long under the throughput "
        "load, after the measurements, and its CPU by stage is printed (0: no profile leg)",
    )
    add(
        "--keep-stacks",
        type=Path,
        metavar="DIR",
        help="profile, all: keep py-spy's raw stacks in DIR (one file per process sampled; "
        "read them again with benchmarks/hotspots.py); without it they are deleted at exit",
    )
    add("--json", nargs="?", const="-", metavar="FILE", help="write results as JSON")
    args = parser.parse_args(argv)
    if args.stream_rounds < 1:
        parser.error("--stream-rounds must be at least 1")
    return args


class Bench:
    """One invocation: the arguments, where the tables go, the runs collected so far."""

    def __init__(self, args: argparse.Namespace, out: TextIO) -> None:
        self.args = args
        self.out = out
        self.runs: list[dict[str, Any]] = []
        self.redis: RedisServer | None = None
        self.gateways: dict[str, tuple[Service, Path, str]] = {}  # name → service, workdir, state
        self._stacks_dir: Path | None = None

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    @property
    def states(self) -> list[str]:
        state: str = self.args.state
        states = ["memory", "redis"] if state == "both" else [state]
        if self.args.workers > 1 and "redis" not in states:
            states.append("redis")  # the 1-worker leg of the workers table
        return states

    def run(self, stack: ExitStack) -> None:
        args = self.args
        if args.keep_stacks is not None:
            args.keep_stacks.mkdir(parents=True, exist_ok=True)
            self._stacks_dir = args.keep_stacks
        else:  # py-spy writes its stacks to a file: a directory of this run's, removed at exit
            self._stacks_dir = Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="fairgate-profile-"))
            )
        modes = {"latency", "throughput"} if args.mode in ("all", "stacks") else {args.mode}
        if args.mode == "profile":
            upstreams = self._upstreams(stack)
            proxies = self._proxies(stack, upstreams)
            self.runs.append(uvloop.run(self._profile(Group(upstreams), proxies)))
        elif modes & {"latency", "throughput"}:
            upstreams = self._upstreams(stack)
            proxies = self._proxies(stack, upstreams)
            for repeat in range(args.repeat):
                if args.repeat > 1:
                    self.say(f"\n--- run {repeat + 1} of {args.repeat}")
                run = uvloop.run(self._measure(upstreams, proxies, modes))
                if self.redis is not None and args.mode != "stacks":
                    run["redis"] = uvloop.run(self._count_redis())
                self.say("\n" + report.configurations_table(run))
                last = repeat == args.repeat - 1
                if args.mode == "all" and args.profile_duration > 0 and last:
                    run["profile"] = uvloop.run(self._profile_configurations(upstreams, proxies))
                self.runs.append(run)
        if args.mode in ("all", "streaming"):
            if not self.runs:
                self.runs.append({})
            self.runs[-1]["streaming"] = self._streaming(stack)

    def _upstreams(self, stack: ExitStack) -> list[Service]:
        """The upstream processes: two for the full path (the model's two replicas)."""
        count = 2 if self.args.path == "full" and self.args.mode != "stacks" else 1
        made = []
        for k in range(count):
            if self.args.upstream == "instant":
                port = self.args.upstream_port if k == 0 else 0
                made.append(stack.enter_context(targets.instant_upstream(port)))
            else:
                made.append(stack.enter_context(targets.sim("--speed", "0")))
        return made

    def _template(self) -> str:
        path: Path | None = self.args.gateway_config
        if path:
            return path.read_text()
        return targets.FULL_CONFIG if self.args.path == "full" else targets.GATEWAY_CONFIG

    def _proxies(self, stack: ExitStack, upstreams: list[Service]) -> list[tuple[Endpoint, Meter]]:
        args = self.args
        upstream = upstreams[0]
        if args.mode == "stacks":
            names = args.stacks.split(",")
        else:  # the yardstick, and the lean floor in the same run
            names = list(dict.fromkeys([args.stack, targets.LEAN_FLOOR]))
        proxies: list[tuple[Endpoint, Meter]] = []
        for name in names:
            missing = targets.missing_library(name)
            if missing:
                self.say(f"{name} skipped: {missing} is not installed (pip install {missing})")
                continue
            service = stack.enter_context(targets.minimal_proxy(upstream.url, name))
            proxies.append((Endpoint.of(name, service), service))
        if args.mode != "stacks" and not args.without_gateway:
            for state in self.states:
                proxies.append(self._gateway(stack, upstreams, state))
            for workers in range(2, args.workers + 1):
                proxies.append(self._gateway(stack, upstreams, "redis", workers=workers))
        if args.mode != "stacks":
            proxies += self._compares()
        return proxies

    def _gateway(
        self, stack: ExitStack, upstreams: list[Service], state: str, workers: int = 1
    ) -> tuple[Endpoint, Service]:
        args = self.args
        redis_url = self._redis_url(stack) if state == "redis" else ""
        name = f"gateway {args.path}/{state}" + (f", {workers} workers" if workers > 1 else "")
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fairgate-bench-")))
        full = args.path == "full" and args.gateway_config is None
        gateway = targets.gateway(
            upstreams[0].url,
            workdir,
            self._template(),
            upstream2=upstreams[-1].url,
            redis_url=redis_url,
            name=name,
            full=full,
            workers=workers,
        )
        service = stack.enter_context(gateway)
        key = args.api_key or service.api_key
        extra = {"x-fairgate-tags": targets.TAG} if full else {}
        self.gateways[name] = (service, workdir, state)
        return Endpoint.of(name, service, key, extra), service

    def _redis_url(self, stack: ExitStack) -> str:
        """The run's private redis-server (started on first use)."""
        if self.redis is None:
            self.redis = stack.enter_context(RedisServer())
        return self.redis.url

    def _compares(self) -> list[tuple[Endpoint, Meter]]:
        args = self.args
        auths: list[str] = args.compare_auth
        if auths and len(auths) not in (1, len(args.compare)):
            raise ServiceError("--compare-auth: give one value for all --compare, or one each")
        legs: list[tuple[Endpoint, Meter]] = []
        for k, url in enumerate(args.compare):
            auth = auths[k if len(auths) > 1 else 0] if auths else ""
            name = f"compare {k + 1}" if len(args.compare) > 1 else "compare"
            endpoint = Endpoint.remote(name, url, auth)
            legs.append((endpoint, Remote(name, url)))
        return legs

    async def _ready(self, proxies: list[tuple[Endpoint, Meter]]) -> None:
        """Every leg answers 200 before anything is measured, else the run fails with the
        answer; a 5xx or a refused connection is retried for 30 s (a compared gateway may
        still be marking the benchmark's upstream healthy)."""
        from http1 import connect, request_bytes

        for endpoint, _ in proxies:
            raw = request_bytes(
                "POST", f"{endpoint.host}:{endpoint.port}", endpoint.path, BODY, endpoint.headers()
            )
            last = ""
            for _ in range(60):
                try:
                    conn = await connect(endpoint.host, endpoint.port)
                    resp = await conn.fetch(raw)
                    conn.close()
                except (ConnectionError, OSError) as exc:
                    last = f"connection error: {exc}"
                else:
                    if resp.status == 200:
                        break
                    last = f"{resp.status} {resp.body[:300]!r}"
                    if resp.status < 500:  # a refusal (a wrong key, an unknown model) stays
                        raise ServiceError(f"{endpoint.name} answered {last}")
                await asyncio.sleep(0.5)
            else:
                raise ServiceError(f"{endpoint.name} never answered 200: {last}")

    @contextlib.asynccontextmanager
    async def _redis_commands(self, name: str) -> AsyncIterator[None]:
        """Around each throughput segment of the Redis gateway: the commands it ran."""
        service = self.gateways.get(name)
        if self.redis is None or service is None or service[2] != "redis":
            yield
            return
        client = redis.Redis(host="127.0.0.1", port=self.redis.port)
        before = roundtrips.commandstats(client)
        redis_cpu, processes = self.redis.cpu_seconds(), service[0].cpu_by_process()
        try:
            yield
        finally:
            self._under_load.update(
                roundtrips.command_delta(before, roundtrips.commandstats(client))
            )
            client.close()
            self._redis_cpu[name] += self.redis.cpu_seconds() - redis_cpu
            after = service[0].cpu_by_process()
            # a process that used at least 10 % of the segment's CPU served its share
            spent = {pid: after[pid] - processes.get(pid, 0.0) for pid in after}
            total = sum(spent.values()) or 1.0
            busy = sum(1 for used in spent.values() if used / total >= 0.1)
            self._busy[name] = max(self._busy[name], busy)

    async def _measure(
        self, upstreams: list[Service], proxies: list[tuple[Endpoint, Meter]], modes: set[str]
    ) -> dict[str, Any]:
        args = self.args
        run: dict[str, Any] = {}
        upstream = upstreams[0]
        direct = Endpoint.of("direct", upstream)
        await self._ready(proxies)
        if "latency" in modes:
            endpoints = [endpoint for endpoint, _ in proxies]
            latency = await measure_latency(
                direct, endpoints, rounds=args.pairs, warmup=args.warmup, body=BODY
            )
            run["latency"] = latency.to_json()
            self.say(f"\nlatency: {args.pairs} rounds after {args.warmup} warm-up, one client (µs)")
            self.say(report.latency_table(latency))
        if "throughput" in modes:
            self._under_load: Counter[str] = Counter()
            self._redis_cpu: defaultdict[str, float] = defaultdict(float)  # seconds
            self._busy: Counter[str] = Counter()
            group = Group(upstreams)
            throughput = await measure_throughput(
                [(direct, group), *proxies],
                group,
                concurrency=args.concurrency,
                duration=args.duration,
                segments=args.segments,
                body=BODY,
                reference=proxies[0][0].name,
                around=self._redis_commands,
            )
            run["throughput"] = throughput.to_json()
            self.say(f"\nthroughput: {args.concurrency} connections, {args.duration:g} s per leg")
            self.say(report.throughput_table(throughput))
            served = sum(
                leg.requests
                for name, leg in throughput.legs.items()
                if name in self.gateways and self.gateways[name][2] == "redis"
            )
            if served and self._under_load:
                per = {k: round(v / served, 3) for k, v in self._under_load.most_common()}
                run["redis_commands_under_load"] = per
            if args.workers > 1:
                run["workers"] = self._workers_table(throughput.to_json()["legs"])
        return run

    def _workers_table(self, legs: dict[str, Any]) -> list[dict[str, Any]]:
        """One row per gateway on Redis: workers, req/s, CPU µs per request of the gateway
        (all its processes) and of Redis, and the ceiling of one Redis core from it."""
        rows = []
        for name, leg in legs.items():
            service = self.gateways.get(name)
            if service is None or service[2] != "redis" or not leg["requests"]:
                continue
            workers = int(name.split(", ")[1].split()[0]) if ", " in name else 1
            redis_us = self._redis_cpu[name] * 1e6 / leg["requests"]
            rows.append(
                {
                    "gateway": name,
                    "workers": workers,
                    "busy_processes": self._busy[name],
                    "rps": leg["rps"],
                    "gateway_cpu_us_per_request": leg["server_cpu_us_per_request"],
                    "redis_cpu_us_per_request": round(redis_us, 1),
                    "one_redis_core_ceiling_rps": round(1e6 / redis_us) if redis_us else None,
                }
            )
        self.say("\nworkers (gateway on Redis; Redis CPU per request measured under the load)")
        self.say("workers  busy  req/s    gateway CPU µs/req  Redis CPU µs/req  one Redis core")
        for row in rows:
            ceiling = row["one_redis_core_ceiling_rps"]
            self.say(
                f"{row['workers']:>7}  {row['busy_processes']:>4}  {row['rps']:>7.0f}  "
                f"{row['gateway_cpu_us_per_request']:>18.0f}  "
                f"{row['redis_cpu_us_per_request']:>16.1f}  "
                f"{'-' if ceiling is None else f'{ceiling:>9} req/s'}"
            )
        return rows

    async def _count_redis(self) -> dict[str, Any]:
        """The counting phase: a replica of the Redis gateway through the counting relay."""
        assert self.redis is not None
        args = self.args
        name = next(n for n, (_, _, state) in self.gateways.items() if state == "redis")
        service, workdir, _ = self.gateways[name]
        async with roundtrips.counting_set_up(self.redis.port) as (relay, urls, arrivals):
            relay_url = f"redis://127.0.0.1:{relay.port}/0"
            counted = targets.counted_gateway(workdir, self._template(), urls, relay_url)
            await asyncio.to_thread(counted.start)
            client = redis.Redis(host="127.0.0.1", port=self.redis.port)
            try:
                endpoint = Endpoint.of(
                    "counted", counted, args.api_key or service.api_key,
                    {"x-fairgate-tags": targets.TAG} if args.path == "full" else {},
                )  # fmt: skip
                trips = await roundtrips.count_round_trips(
                    endpoint,
                    relay,
                    arrivals,
                    client,
                    body=BODY,
                    requests=args.count_requests,
                    idle=args.count_idle,
                )
            finally:
                client.close()
                await asyncio.to_thread(counted.stop)
        self.say(f"\nRedis ({name}, counted on a replica through a relay)")
        self.say(trips.table())
        return {"gateway": name, **trips.to_json()}

    async def _profile(
        self, upstream: Meter, proxies: list[tuple[Endpoint, Meter]]
    ) -> dict[str, Any]:
        """Each proxy alone under the throughput load while py-spy samples it."""
        args = self.args
        profiles: dict[str, Any] = {}
        directory = self._stacks()
        await self._ready(proxies)
        for endpoint, service in proxies:
            if not isinstance(service, Service):
                continue  # a compared gateway: no process of ours to sample
            spots, profile = await self._sample(
                endpoint, service, upstream, args.duration, directory
            )
            cpu = profile["server_cpu_us_per_request"]
            self.say(f"\nprofile of {endpoint.name} under {args.concurrency} connections")
            self.say(f"({profile['rps']:.0f} req/s, {cpu:.0f} CPU µs per request while sampled)")
            if "stacks" in profile:
                self.say(f"(raw stacks in {profile['stacks']})")
            self.say(spots.stage_table(us_per_request=cpu))
            self.say(spots.table(args.top, us_per_request=cpu))
            profiles[endpoint.name] = profile
        return {"profile": profiles}

    async def _profile_configurations(
        self, upstreams: list[Service], proxies: list[tuple[Endpoint, Meter]]
    ) -> dict[str, Any]:
        """Mode ``all``: each gateway configuration of one worker (memory, Redis) alone under
        the throughput load for ``--profile-duration`` s while py-spy samples it; its CPU by
        stage and top functions. py-spy missing or refused: one line says so, no profile."""
        args = self.args
        seconds = args.profile_duration
        legs = [
            (endpoint, service)
            for endpoint, service in proxies
            if isinstance(service, Service)
            and endpoint.name in self.gateways
            and ", " not in endpoint.name  # a gateway of N workers: no one process to sample
        ]
        profiles: dict[str, Any] = {}
        if not legs:
            return profiles
        self.say(
            f"\nCPU by stage per configuration (py-spy, {seconds:g} s each under "
            f"{args.concurrency} connections; --profile-duration 0 skips this)"
        )
        directory = self._stacks()
        for endpoint, service in legs:
            try:
                spots, profile = await self._sample(
                    endpoint, service, Group(upstreams), seconds, directory
                )
            except hotspots.Unavailable as exc:
                self.say(f"no profile of the gateway configurations: {exc}")
                break  # what refused one (no py-spy, no ptrace) refuses the others
            cpu = profile["server_cpu_us_per_request"]
            kept = f" (stacks: {profile['stacks']})" if "stacks" in profile else ""
            self.say(
                f"\nprofile of {endpoint.name}: {profile['rps']:.0f} req/s, "
                f"{cpu:.0f} CPU µs per request while sampled{kept}"
            )
            self.say(spots.stage_table(us_per_request=cpu))
            self.say(spots.top_self(PROFILE_TOP, us_per_request=cpu))
            profiles[endpoint.name] = {"seconds": seconds, **profile}
        return profiles

    def _stacks(self) -> Path:
        """Where py-spy writes this run's raw stacks (``--keep-stacks``, or a temporary
        directory the run removes at exit)."""
        assert self._stacks_dir is not None, "run() sets it first"
        return self._stacks_dir

    async def _sample(
        self, endpoint: Endpoint, service: Service, upstream: Meter, seconds: float, directory: Path
    ) -> tuple[hotspots.Hotspots, dict[str, Any]]:
        """``endpoint`` alone under the throughput load for ``seconds`` while py-spy samples
        its process; the stacks summed, and the profile's figures for the JSON.
        ``hotspots.Unavailable`` when py-spy is missing or could not sample."""
        args = self.args
        out = directory / f"{endpoint.name.replace('/', '-').replace(' ', '-')}.txt"
        spy = hotspots.record(service.pid, seconds, out)
        try:
            load = await measure_throughput(
                [(endpoint, service)],
                upstream,
                concurrency=args.concurrency,
                duration=seconds,
                segments=1,
                body=BODY,
                reference=endpoint.name,
            )
        except BaseException:
            spy.kill()
            spy.communicate()
            raise
        spots = await asyncio.to_thread(hotspots.collect, spy, out, seconds + 60)
        leg = load.legs[endpoint.name]
        cpu = leg.to_json()["server_cpu_us_per_request"]
        kept = {"stacks": str(out)} if self.args.keep_stacks is not None else {}
        return spots, {
            **kept,
            "rps": round(leg.rps, 1),
            "errors": leg.errors,
            "first_error": leg.first_error,
            "server_cpu_us_per_request": cpu,
            **spots.to_json(),
        }

    def _streaming(self, stack: ExitStack) -> list[dict[str, Any]]:
        """The streaming leg once per state of ``--state``: the gateway on ``--path``, in
        front of two engines for the full path (its two replicas, with the key and tag
        header of the other legs) or one for the bare path, and the minimal proxy."""
        args = self.args
        full = args.path == "full" and args.gateway_config is None
        template = self._template()
        headers = {"x-fairgate-tags": targets.TAG} if full else {}
        engines = 2 if args.path == "full" else 1

        def minimal(upstream: str, workdir: Path) -> Service:
            return targets.minimal_proxy(upstream, args.stack)

        def minimal_alone(upstreams: list[str], workdir: Path) -> Service:
            return minimal(upstreams[0], workdir)

        def gateway_on(state: str) -> Callable[[list[str], Path], Service]:
            redis_url = self._redis_url(stack) if state == "redis" else ""

            def gateway(upstreams: list[str], workdir: Path) -> Service:
                return targets.gateway(
                    upstreams[0],
                    workdir,
                    template,
                    upstream2=upstreams[-1],
                    redis_url=redis_url,
                    name=f"gateway {args.path}/{state}",
                    full=full,
                )

            return gateway

        states: list[str] = ["memory", "redis"] if args.state == "both" else [args.state]
        results = []
        for state in [""] if args.without_gateway else states:
            result = uvloop.run(
                measure_streaming(
                    minimal_alone if args.without_gateway else gateway_on(state),
                    streams=args.streams,
                    tokens=args.stream_tokens,
                    token_rate=args.token_rate,
                    disconnects=args.disconnects,
                    api_key=args.api_key,
                    headers={} if args.without_gateway else headers,
                    engines=1 if args.without_gateway else engines,
                    path="" if args.without_gateway else args.path,
                    state=state,
                    burst=args.burst,
                    yardstick=None if args.without_gateway else minimal,
                    rounds=args.stream_rounds,
                )
            )
            self.say(f"\nstreaming: {args.streams} concurrent streams through {result.proxy}")
            self.say(result.table())
            results.append(result.to_json())
        return results

    def conclude(self, machine: dict[str, Any]) -> dict[str, Any]:
        if self.args.repeat > 1:
            self.say("\n" + report.ranges_table(self.runs))
        checks = report.verdict(self.runs[-1]) if self.runs else {}
        if checks:
            self.say("\n" + report.verdict_table(checks, self.runs[-1].get("profile")))
        machine["load_at_end"] = load_average()
        self.say(f"load      {machine['load_at_end']} at end")
        return {"machine": machine, "runs": self.runs, "targets": checks}


def _commit() -> str:
    """The commit measured (and whether src/ differed from it), or "" outside git."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "src"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return ""
    return head + (" (src/ with uncommitted changes)" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _arguments(argv)
    bench = Bench(args, sys.stderr if args.json == "-" else sys.stdout)
    fd_limit = raise_fd_limit(4 * args.streams + 1024)
    machine = describe(argv)
    machine["fd_limit"] = fd_limit
    machine["commit"] = _commit()
    bench.say(report.header(machine))
    try:
        with ExitStack() as stack:
            bench.run(stack)
    except (ServiceError, RuntimeError, ValueError) as exc:
        print(f"overhead.py: {exc}", file=sys.stderr)
        return 2
    concluded = bench.conclude(machine)
    document = json.dumps(concluded, indent=2)
    if args.json == "-":
        print(document)
    elif args.json:
        Path(args.json).write_text(document + "\n")
    failures = report.failures(concluded["runs"])
    for failure in failures:
        print(f"overhead.py: FAILED: {failure}", file=sys.stderr)
    return 3 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
