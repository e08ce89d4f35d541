"""The gateway's full path in one process: CPU time and Python calls per request.

    python benchmarks/cpu_profile.py [--requests 4000] [--concurrency 32] [--state memory|redis]
                                     [--profile [--save FILE]]
    python benchmarks/cpu_profile.py --stream 64 [--gap 0.005] ...

The benchmark's full configuration (targets.FULL_CONFIG, the key, limits and budgets
``provision_full`` sets) and its two instant upstreams, but the Gateway runs in this
process and its client listener's ASGI application is called directly (no socket, no
server): what is left is the request path's own work. Printed: CPU µs per request
(user and system, from ``os.times``: CPU time, so a machine shared with other work
changes it far less than it changes a wall-clock figure) and, with ``--profile``, the
number of Python function calls per request and cProfile's table sorted by own time,
measured in the thread's CPU time (``time.thread_time``) instead of wall time.
``--state redis`` starts a private redis-server on a free loopback port (as
``overhead.py --state redis`` does, never the shared 6379) and points the Gateway at it;
Redis's own CPU per request is printed beside the gateway's.

Why it exists beside ``overhead.py profile``: py-spy samples say where the wall time
of a running thread goes, so on a loaded machine a socket write that gets the process
preempted looks expensive; call counts and CPU-timed own time do not move with the load.
A coroutine's cumulative time here includes what ran while it was suspended: read the
own-time column (tottime).

``--stream N``: each request asks for a stream, and the instant upstreams answer with N
content events written ``--gap`` seconds apart (then ``[DONE]``; a usage event before it
when the request asks for one, as the gateway does for vLLM), so the gateway reads each
as a chunk of its own. Printed besides: the chunks relayed to the client (body messages
with ``more_body``) and the CPU µs and Python calls per relayed chunk (the whole
request's cost divided by its chunks: with N large, the per-token cost).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import uvloop

import targets
from fairgate.app import Gateway
from fairgate.config import load_config
from fairgate.run import settle_heap
from roundtrips import command_delta, commandstats
from services import RedisServer

BODY = (
    b'{"model":"sim-model","messages":[{"role":"user","content":"Say hello."}],'
    b'"max_tokens":1,"temperature":0}'
)
STREAM_BODY = (
    b'{"model":"sim-model","messages":[{"role":"user","content":"Say hello."}],'
    b'"max_tokens":64,"temperature":0,"stream":true}'
)


async def _run(config: Path, key: str, args: argparse.Namespace, redis: RedisServer | None) -> None:
    body = STREAM_BODY if args.stream else BODY
    relayed = 0  # body messages with more_body: the chunks a stream relayed
    gateway = Gateway(load_config(config))
    await gateway.start()
    settle_heap()  # as `fairgate serve` does once started
    app = gateway.proxy_app
    headers = [
        (b"host", b"gateway"),
        (b"authorization", f"Bearer {key}".encode()),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"x-fairgate-tags", targets.TAG.encode()),
    ]

    async def one() -> None:
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/v1/chat/completions",
            "raw_path": b"/v1/chat/completions",
            "query_string": b"",
            "headers": headers,
            "client": ("127.0.0.1", 40000),
            "server": ("127.0.0.1", 8000),
        }
        done = asyncio.Event()
        status = 0
        sent = False

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status, relayed
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message.get("more_body", False):
                relayed += 1
            else:
                done.set()

        await app(scope, receive, send)
        done.set()
        if status != 200:
            raise RuntimeError(f"the gateway answered {status}")

    async def client(count: int) -> None:
        for _ in range(count):
            await one()

    each = max(1, args.requests // args.concurrency)
    total = each * args.concurrency
    try:
        warm = 2 if args.stream else 20  # a stream lasts N gaps
        await asyncio.gather(*[client(warm) for _ in range(args.concurrency)])  # warm-up
        profile = cProfile.Profile(time.thread_time) if args.profile else None
        redis_before = redis.cpu_seconds() if redis is not None else 0.0
        stats_before = commandstats(redis.client()) if redis is not None else None
        relayed = 0
        before, start = os.times(), time.perf_counter()
        if profile is not None:
            profile.enable()
        await asyncio.gather(*[client(each) for _ in range(args.concurrency)])
        if profile is not None:
            profile.disable()
        after, wall = os.times(), time.perf_counter() - start
        redis_cpu = redis.cpu_seconds() - redis_before if redis is not None else 0.0
        stats_after = commandstats(redis.client()) if redis is not None else None
    finally:
        await gateway.stop()
    user = 1e6 * (after.user - before.user) / total
    system = 1e6 * (after.system - before.system) / total
    print(f"{total} requests, {args.concurrency} at a time, {total / wall:.0f} req/s")
    print(f"CPU per request: {user + system:.0f} µs ({user:.0f} user, {system:.0f} system)")
    if redis is not None:
        print(f"Redis CPU per request: {1e6 * redis_cpu / total:.0f} µs")
    if stats_before is not None and stats_after is not None:
        ran = command_delta(stats_before, stats_after)
        per = ", ".join(f"{name} {calls / total:.2f}" for name, calls in ran.most_common())
        print(f"Redis commands per request (scripts' inner ones included): {per}")
    if args.stream:
        print(
            f"{relayed} chunks relayed ({relayed / total:.1f} a stream): CPU per chunk "
            f"{(user + system) * total / max(1, relayed):.1f} µs"
        )
    if profile is not None:
        stats = pstats.Stats(profile)
        calls: int = stats.total_calls  # type: ignore[attr-defined]
        print(f"(profiled) Python function calls per request: {calls / total:.0f}")
        if args.stream:
            print(f"(profiled) Python function calls per chunk: {calls / max(1, relayed):.1f}")
        stats.sort_stats("tottime").print_stats(args.top)
        if args.save:
            stats.dump_stats(args.save)  # for pstats: callers, callees


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--state", choices=("memory", "redis"), default="memory")
    parser.add_argument("--profile", action="store_true", help="cProfile in CPU time")
    parser.add_argument("--top", type=int, default=40, help="--profile: lines of the table")
    parser.add_argument("--save", metavar="FILE", help="--profile: also write the pstats file")
    parser.add_argument(
        "--stream", type=int, default=0, metavar="N", help="streams of N paced content events"
    )
    parser.add_argument("--gap", type=float, default=0.005, help="--stream: seconds between events")
    args = parser.parse_args(argv)
    paced = ("--stream-chunks", str(args.stream), "--chunk-gap", str(args.gap))
    with ExitStack() as stack:
        first = stack.enter_context(targets.instant_upstream(0, *paced))
        second = stack.enter_context(targets.instant_upstream(0, *paced))
        redis = stack.enter_context(RedisServer()) if args.state == "redis" else None
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fairgate-cpu-")))
        # provisions the store (the key, its limits, the budgets); the service is not started
        service = targets.gateway(
            first.url,
            workdir,
            targets.FULL_CONFIG,
            upstream2=second.url,
            redis_url=redis.url if redis is not None else "",
            full=True,
        )
        config = next(workdir.glob("*.yaml"))
        if redis is not None:  # cProfile on a shared machine can pass the 0.5 s default
            text = config.read_text().replace("backend: redis,", "backend: redis, timeout: 10s,")
            config.write_text(text)
        stack.callback(os.chdir, os.getcwd())
        os.chdir(workdir)  # the configuration names its files relative to it
        uvloop.run(_run(config, service.api_key, args, redis))
    return 0


if __name__ == "__main__":
    sys.exit(main())
