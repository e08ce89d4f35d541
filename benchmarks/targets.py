"""What a run measures: the upstream, the minimal proxy on a chosen stack, and the gateway.

An ``Endpoint`` is where the client sends a leg's requests (and with which key); the
functions below build the ``Service`` that serves it. Stacks are named
``SERVER+CLIENT``; ``uvicorn+aiohttp`` is the gateway's own and the yardstick, and
``uvicorn+fairgate`` (the gateway's own upstream client) the lean floor.

The gateway runs one of two paths: ``bare`` (``GATEWAY_CONFIG``: one replica, a key
without limits, no budget, no pool) or ``full`` (``FULL_CONFIG`` plus ``provision_full``:
what an operator runs, every stage doing its work and none of it binding).
"""

from __future__ import annotations

import importlib.util
import json
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from services import BENCH_DIR, Service, ServiceError, python

__all__ = [
    "FULL_CONFIG",
    "GATEWAY_CONFIG",
    "LEAN_FLOOR",
    "STACKS",
    "TAG",
    "YARDSTICK",
    "Endpoint",
    "gateway",
    "instant_upstream",
    "minimal_proxy",
    "missing_library",
    "sim",
]

YARDSTICK = "uvicorn+aiohttp"
LEAN_FLOOR = "uvicorn+fairgate"  # the minimal proxy on the gateway's own upstream client
STACKS = (
    "uvicorn+aiohttp",
    "uvicorn+httpx",
    "uvicorn+raw",
    "uvicorn+fairgate",
    "granian+aiohttp",
    "aiohttp+aiohttp",
    "uvicorn-limited+aiohttp",
)

# {upstream} is replaced by the upstream's base URL. Ports 0: the gateway picks free ones
# and prints them in its ready line.
GATEWAY_CONFIG = """\
listen: {host: 127.0.0.1, port: 0}
admin_listen: {host: 127.0.0.1, port: 0}
logging: {level: warning}
# one load generator on one loopback address, up to 1000 streams: as behind a proxy
limits: {max_connections: 4096, max_connections_per_network: null}
store: {url: "sqlite:///fairgate.db"}
{state}
orgs: [{name: bench-org, share: 1.0, teams: [bench]}]
models:
  - name: sim-model
    engine: vllm
    upstreams: [{name: sim1, url: "{upstream}"}]
"""

TAG = "bench-run"  # sent in the allow-listed tags header on every request of the full path

# The full path: every stage has work to do and nothing binds. Two replicas (two upstream
# processes), a pool with fair share between two organisations (the benchmark's holds 3/4:
# a reservation of 3,072 seats for 32 connections), admission bands (the benchmark's team
# in a band with ceiling 0.95; saturation under load stays near 32 / 4,096), cache salts
# from a fixed key, a tag from the allow-listed header (with a tag budget), accounting on
# SQLite, /metrics as always. The key's limits, the team's totals and the budgets are set
# through the operator CLI by ``provision_full``.
FULL_CONFIG = """\
listen: {host: 127.0.0.1, port: 0}
admin_listen: {host: 127.0.0.1, port: 0}
logging: {level: warning}
limits: {max_connections: 4096, max_connections_per_network: null}
store: {url: "sqlite:///fairgate.db"}
{state}
pools: [{name: bench-pool, capacity: 4096}]
orgs:
  - {name: bench-org, share: 0.75, teams: [bench], tags: [bench-run]}
  - {name: idle-org, share: 0.25, teams: [idle]}
models:
  - name: sim-model
    engine: vllm
    pool: bench-pool
    cost: {input_per_mtok: 0.02, output_per_mtok: 0.2, cached_per_mtok: 0.002}
    upstreams:
      - {name: sim1, url: "{upstream}"}
      - {name: sim2, url: "{upstream2}"}
fairshare: {half_life: 168h}
admission:
  default_band: bronze
  bands:
    - {name: gold, ceiling: 0.95, teams: [bench]}
    - {name: bronze, ceiling: 0.8}
cache_isolation: {scope: org, key_file: cache-salt.key}
tags: {header: x-fairgate-tags, max_per_request: 8, allowed: [bench-run]}
"""

# Limits far above what 2 cores can send (a few thousand requests per second), within
# the ranges the store accepts (at most 10^9).
_BIG = "1000000000"
_KEY_LIMITS = ["--rpm", _BIG, "--tpm", _BIG, "--rpd", _BIG, "--max-inflight", "100000"]
_TEAM_TOTALS = ["--total-rpm", _BIG, "--total-tpm", _BIG, "--total-rpd", _BIG]
_TEAM_TOTALS += ["--total-max-inflight", "100000"]
# GPU-hours; a request here costs about 10^-6
_BUDGETS = [
    ("team:bench", "month", "1000000", "900000"),  # the one with a soft limit
    ("key:{key}", "day", "1000000", None),
    ("tag:org:bench-org/bench-run", "month", "1000000", None),
]


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A leg of the benchmark: a name, an address, and the bearer key it needs (if any)."""

    name: str
    host: str
    port: int
    api_key: str = ""
    path: str = "/v1/chat/completions"
    extra: tuple[tuple[str, str], ...] = ()  # more request headers (the tags header)

    @classmethod
    def of(
        cls, name: str, service: Service, api_key: str = "", extra: dict[str, str] | None = None
    ) -> Endpoint:
        parts = urlsplit(service.url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        return cls(name, host, port, api_key, extra=tuple((extra or {}).items()))

    @classmethod
    def remote(cls, name: str, url: str, auth: str = "") -> Endpoint:
        """Another gateway (``--compare``): ``auth`` is a whole Authorization value
        (``Bearer sk-…``) or a bare key, sent as a bearer."""
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"--compare takes an http://host:port[/path] URL, got {url!r}")
        base = parts.path.rstrip("/")
        path = base + ("/chat/completions" if base.endswith("/v1") else "/v1/chat/completions")
        extra = (("Authorization", auth if " " in auth.strip() else f"Bearer {auth}"),)
        return cls(name, parts.hostname, parts.port or 80, path=path, extra=extra if auth else ())

    def headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        headers.update(self.extra)
        return headers


def instant_upstream(port: int = 0, *args: str) -> Service:
    """The lean upstream (``instant_upstream.py``; ``args``: its options, e.g. paced streams)."""
    argv = python(str(BENCH_DIR / "instant_upstream.py"), "--port", str(port), *args)
    return Service("upstream", argv)


def sim(*args: str) -> Service:
    """The simulated engine; ``--speed 0`` (or its equivalent in ``args``) answers at once."""
    argv = python("-m", "fairgate", "sim", "--host", "127.0.0.1", "--port", "0", *args)
    return Service("sim", argv)


def missing_library(stack: str) -> str:
    """The library a stack needs that is not installed ("" if none): granian is optional."""
    needs = [name for name in ("granian",) if name in stack]
    return next((name for name in needs if importlib.util.find_spec(name) is None), "")


def minimal_proxy(upstream: str, stack: str = YARDSTICK) -> Service:
    if stack not in STACKS:
        raise ValueError(f"unknown stack {stack!r}; choose from {', '.join(STACKS)}")
    server, client = stack.split("+")
    script = str(BENCH_DIR / "minimal_proxy.py")
    argv = python(script, "--upstream", upstream, "--server", server, "--client", client)
    return Service(stack, argv)


def state_block(redis_url: str = "", url_file: str = "redis.url") -> str:
    """The ``state:`` line of a template: memory, or Redis at ``redis_url`` (its URL goes
    in ``url_file`` beside the config, as a secret file)."""
    if not redis_url:
        return "state: {backend: memory}"
    return f'state: {{backend: redis, url_file: {url_file}, prefix: "fairgate-bench:"}}'


def write_config(
    workdir: Path,
    template: str,
    upstreams: list[str],
    *,
    redis_url: str = "",
    name: str = "gateway.yaml",
) -> Path:
    """The config from ``template``: ``{upstream}``/``{upstream2}`` replaced by the
    upstreams' URLs, ``{state}`` by the state back end; secret files beside it."""
    url_file = name.removesuffix(".yaml") + "-redis.url"
    text = template.replace("{state}", state_block(redis_url, url_file))
    text = text.replace("{upstream}", upstreams[0])
    text = text.replace("{upstream2}", upstreams[-1])
    if "{upstream2}" in template and len(set(upstreams)) < 2:
        raise ValueError("the full path needs two upstreams")
    config = workdir / name
    config.write_text(text)
    if redis_url:
        (workdir / url_file).write_text(redis_url + "\n")
    salt = workdir / "cache-salt.key"
    if "cache-salt.key" in template and not salt.exists():  # replicas share the key
        salt.write_text(secrets.token_urlsafe(32) + "\n")
    return config


def gateway(
    upstream: str,
    workdir: Path,
    template: str = GATEWAY_CONFIG,
    *,
    upstream2: str = "",
    redis_url: str = "",
    name: str = "gateway",
    full: bool = False,
    workers: int = 1,
) -> Service:
    """``fairgate serve`` on a config written from ``template`` into ``workdir``; with
    ``full`` the benchmark key gets its limits and budgets from the operator CLI;
    ``workers`` > 1 runs ``serve --workers N`` (Redis state only)."""
    config = write_config(workdir, template, [upstream, upstream2 or upstream], redis_url=redis_url)
    argv = python("-m", "fairgate", "serve", "-c", str(config))
    if workers > 1:
        argv += ["--workers", str(workers)]
    service = Service(name, argv, cwd=workdir)
    if full:
        service.api_key = provision_full(config)
    elif "teams: [bench]" in template:
        service.api_key = _fairgate_json(config, "keys", "create", "--team", "bench")["secret"]
    return service


def counted_gateway(workdir: Path, template: str, upstreams: list[str], redis_url: str) -> Service:
    """A second gateway process on the same store (and key) as the one in ``workdir``,
    talking to Redis at ``redis_url`` (the counting relay): a replica of that deployment."""
    config = write_config(
        workdir, template, upstreams, redis_url=redis_url, name="gateway-counted.yaml"
    )
    argv = python("-m", "fairgate", "serve", "-c", str(config))
    return Service("gateway (counted)", argv, cwd=workdir)


def provision_full(config: Path) -> str:
    """The benchmark key with limits that never bind, its team's totals, and the budgets
    (one with a soft limit), through the operator CLI; returns the key's secret."""
    _fairgate_json(config, "teams", "update", "bench", *_TEAM_TOTALS)
    key = _fairgate_json(config, "keys", "create", "--team", "bench", *_KEY_LIMITS)
    for scope, period, cap, soft in _BUDGETS:
        argv = ["budgets", "set", "--scope", scope.format(key=key["id"]), "--period", period]
        argv += ["--max", cap, *(["--soft", soft] if soft else [])]
        _fairgate_json(config, *argv)
    secret: str = key["secret"]
    return secret


def _fairgate_json(config: Path, *argv: str) -> dict[str, Any]:
    """One operator CLI command with ``--json``; its first (or only) object."""
    done = subprocess.run(
        python("-m", "fairgate", *argv, "--json", "-c", str(config)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=config.parent,
    )
    if done.returncode != 0:
        raise ServiceError(f"fairgate {' '.join(argv[:2])} failed: {done.stderr.strip()[-500:]}")
    document = json.loads(done.stdout)
    first: dict[str, Any] = document[0] if isinstance(document, list) else document
    return first
