"""fairgate's overhead benchmark: the gateway against a minimal proxy and a direct call.

    python benchmarks/overhead.py [all|latency|throughput|streaming|stacks|profile] [options]

- ``latency``: N interleaved rounds on one keep-alive client (direct, minimal proxy,
  gateway); p50/p99 of each leg and of the latency each proxy adds; ratios to the
  minimal proxy's.
- ``throughput``: C keep-alive connections for T seconds per leg; req/s, ratio, CPU µs
  per request of each server process.
- ``streaming``: S concurrent streams through the gateway against the simulated engine
  at a finite token rate, all checked complete; then K streams dropped mid-way by the
  client, and the engine's running count must fall back to 0.
- ``stacks``: latency and throughput of the minimal proxy on each server/client stack
  (the measurement behind the gateway's choice of layers).
- ``profile``: each proxy alone under the throughput load, sampled by py-spy; CPU time
  per library and per function (what costs what).
- ``all`` (default): latency, throughput and streaming, then the verdict against the
  targets of PRODUCT.md §2.

Every run prints the machine, the library versions and the command line; ``--json
[FILE]`` writes the same as JSON (to stdout without FILE, the tables then go to stderr).
docs/benchmarks.md explains the method and how to read the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TextIO

import uvloop

import hotspots
import report
import targets
from latency import measure_latency
from machine import describe, load_average, raise_fd_limit
from services import Service, ServiceError
from streaming import measure_streaming
from targets import Endpoint
from throughput import measure_throughput

BODY = (
    b'{"model":"sim-model","messages":[{"role":"user","content":"Say hello."}],'
    b'"max_tokens":1,"temperature":0}'
)
MODES = ("all", "latency", "throughput", "streaming", "stacks", "profile")


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
    add("--gateway-config", type=Path, help="YAML template; {upstream} is replaced")
    add("--api-key", default="", help="bearer key for the gateway legs")
    add("--repeat", type=int, default=1, help="repeat the measurements in the same processes")
    add("--top", type=int, default=25, help="profile: lines per table")
    add("--json", nargs="?", const="-", metavar="FILE", help="write results as JSON")
    return parser.parse_args(argv)


class Bench:
    """One invocation: the arguments, where the tables go, the runs collected so far."""

    def __init__(self, args: argparse.Namespace, out: TextIO) -> None:
        self.args = args
        self.out = out
        self.runs: list[dict[str, Any]] = []

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def run(self, stack: ExitStack) -> None:
        args = self.args
        modes = {"latency", "throughput"} if args.mode in ("all", "stacks") else {args.mode}
        if args.mode == "profile":
            upstream = self._upstream(stack)
            self.runs.append(uvloop.run(self._profile(upstream, self._proxies(stack, upstream))))
        elif modes & {"latency", "throughput"}:
            upstream = self._upstream(stack)
            proxies = self._proxies(stack, upstream)
            for repeat in range(args.repeat):
                if args.repeat > 1:
                    self.say(f"\n--- run {repeat + 1} of {args.repeat}")
                self.runs.append(uvloop.run(self._measure(upstream, proxies, modes)))
        if args.mode in ("all", "streaming"):
            if not self.runs:
                self.runs.append({})
            self.runs[-1]["streaming"] = uvloop.run(self._streaming())

    def _upstream(self, stack: ExitStack) -> Service:
        if self.args.upstream == "instant":
            return stack.enter_context(targets.instant_upstream())
        return stack.enter_context(targets.sim("--speed", "0"))

    def _template(self) -> str:
        path: Path | None = self.args.gateway_config
        return path.read_text() if path else targets.GATEWAY_CONFIG

    def _proxies(self, stack: ExitStack, upstream: Service) -> list[tuple[Endpoint, Service]]:
        args = self.args
        names = args.stacks.split(",") if args.mode == "stacks" else [args.stack]
        proxies = []
        for name in names:
            missing = targets.missing_library(name)
            if missing:
                self.say(f"{name} skipped: {missing} is not installed (pip install {missing})")
                continue
            service = stack.enter_context(targets.minimal_proxy(upstream.url, name))
            proxies.append((Endpoint.of(name, service), service))
        if args.mode != "stacks" and not args.without_gateway:
            workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="fairgate-bench-"))
            gateway = targets.gateway(upstream.url, Path(workdir), self._template())
            service = stack.enter_context(gateway)
            key = args.api_key or service.api_key
            proxies.append((Endpoint.of("gateway", service, key), service))
        return proxies

    async def _measure(
        self, upstream: Service, proxies: list[tuple[Endpoint, Service]], modes: set[str]
    ) -> dict[str, Any]:
        args = self.args
        run: dict[str, Any] = {}
        direct = Endpoint.of("direct", upstream)
        if "latency" in modes:
            endpoints = [endpoint for endpoint, _ in proxies]
            latency = await measure_latency(
                direct, endpoints, rounds=args.pairs, warmup=args.warmup, body=BODY
            )
            run["latency"] = latency.to_json()
            self.say(f"\nlatency: {args.pairs} rounds after {args.warmup} warm-up, one client (µs)")
            self.say(report.latency_table(latency))
        if "throughput" in modes:
            throughput = await measure_throughput(
                [(direct, upstream), *proxies],
                upstream,
                concurrency=args.concurrency,
                duration=args.duration,
                segments=args.segments,
                body=BODY,
                reference=proxies[0][0].name,
            )
            run["throughput"] = throughput.to_json()
            self.say(f"\nthroughput: {args.concurrency} connections, {args.duration:g} s per leg")
            self.say(report.throughput_table(throughput))
        return run

    async def _profile(
        self, upstream: Service, proxies: list[tuple[Endpoint, Service]]
    ) -> dict[str, Any]:
        """Each proxy alone under the throughput load while py-spy samples it."""
        args = self.args
        profiles: dict[str, Any] = {}
        directory = Path(tempfile.mkdtemp(prefix="fairgate-profile-"))
        for endpoint, service in proxies:
            out = directory / f"{endpoint.name}.txt"
            spy = hotspots.record(service.pid, args.duration, out)
            load = await measure_throughput(
                [(endpoint, service)],
                upstream,
                concurrency=args.concurrency,
                duration=args.duration,
                segments=1,
                body=BODY,
                reference=endpoint.name,
            )
            _, error = spy.communicate(timeout=args.duration + 60)
            if not out.exists():
                raise RuntimeError(f"py-spy wrote nothing: {error.decode(errors='replace')}")
            spots = hotspots.parse(out.read_text())
            leg = load.legs[endpoint.name]
            self.say(f"\nprofile of {endpoint.name} under {args.concurrency} connections")
            cpu = leg.to_json()["server_cpu_us_per_request"]
            self.say(f"({leg.rps:.0f} req/s, {cpu:.0f} CPU µs per request while sampled)")
            self.say(f"(raw stacks in {out})")
            self.say(spots.table(args.top, us_per_request=cpu))
            profiles[endpoint.name] = {
                "stacks": str(out),
                "rps": round(leg.rps, 1),
                "server_cpu_us_per_request": cpu,
                **spots.to_json(),
            }
        return {"profile": profiles}

    async def _streaming(self) -> dict[str, Any]:
        args = self.args

        def gateway(upstream: str, workdir: Path) -> Service:
            return targets.gateway(upstream, workdir, self._template())

        def minimal(upstream: str, workdir: Path) -> Service:
            return targets.minimal_proxy(upstream, args.stack)

        result = await measure_streaming(
            minimal if args.without_gateway else gateway,
            streams=args.streams,
            tokens=args.stream_tokens,
            token_rate=args.token_rate,
            disconnects=args.disconnects,
            api_key=args.api_key,
            burst=args.burst,
            yardstick=None if args.without_gateway else minimal,
        )
        self.say(f"\nstreaming: {args.streams} concurrent streams through {result.proxy}")
        self.say(result.table())
        return result.to_json()

    def conclude(self, machine: dict[str, Any]) -> dict[str, Any]:
        if self.args.repeat > 1:
            self.say("\n" + report.ranges_table(self.runs))
        checks = report.verdict(self.runs[-1]) if self.runs else {}
        if checks:
            self.say("\ntargets (PRODUCT.md §2: gateway against the minimal proxy, last run)")
            for name, check in checks.items():
                value = (
                    f" {check['value']:.2f} (limit {check['limit']})" if "value" in check else ""
                )
                self.say(f"  {name:<20}{value}  {'met' if check['met'] else 'MISSED'}")
        machine["load_at_end"] = load_average()
        self.say(f"load      {machine['load_at_end']} at end")
        return {"machine": machine, "runs": self.runs, "targets": checks}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _arguments(argv)
    bench = Bench(args, sys.stderr if args.json == "-" else sys.stdout)
    fd_limit = raise_fd_limit(4 * args.streams + 1024)
    machine = describe(argv)
    machine["fd_limit"] = fd_limit
    bench.say(report.header(machine))
    try:
        with ExitStack() as stack:
            bench.run(stack)
    except ServiceError as exc:
        print(f"overhead.py: {exc}", file=sys.stderr)
        return 2
    document = json.dumps(bench.conclude(machine), indent=2)
    if args.json == "-":
        print(document)
    elif args.json:
        Path(args.json).write_text(document + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
