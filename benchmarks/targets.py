"""What a run measures: the upstream, the minimal proxy on a chosen stack, and the gateway.

An ``Endpoint`` is where the client sends a leg's requests (and with which key); the
functions below build the ``Service`` that serves it. Stacks are named
``SERVER+CLIENT``; ``uvicorn+aiohttp`` is the gateway's own and the yardstick.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from services import BENCH_DIR, Service, python

__all__ = [
    "GATEWAY_CONFIG",
    "STACKS",
    "YARDSTICK",
    "Endpoint",
    "gateway",
    "instant_upstream",
    "minimal_proxy",
    "missing_library",
    "sim",
]

YARDSTICK = "uvicorn+aiohttp"
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
orgs: [{name: bench-org, share: 1.0, teams: [bench]}]
models:
  - name: sim-model
    engine: vllm
    upstreams: [{name: sim1, url: "{upstream}"}]
"""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A leg of the benchmark: a name, an address, and the bearer key it needs (if any)."""

    name: str
    host: str
    port: int
    api_key: str = ""

    @classmethod
    def of(cls, name: str, service: Service, api_key: str = "") -> Endpoint:
        parts = urlsplit(service.url)
        return cls(name, parts.hostname or "127.0.0.1", parts.port or 80, api_key)

    def headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers


def instant_upstream() -> Service:
    return Service("upstream", python(str(BENCH_DIR / "instant_upstream.py")))


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


def gateway(upstream: str, workdir: Path, template: str = GATEWAY_CONFIG) -> Service:
    """``fairgate serve`` on a config written from ``template`` into ``workdir``."""
    config = workdir / "gateway.yaml"
    config.write_text(template.replace("{upstream}", upstream))
    service = Service("gateway", python("-m", "fairgate", "serve", "-c", str(config)), cwd=workdir)
    service.api_key = _bench_key(config) if "teams: [bench]" in template else ""
    return service


def _bench_key(config: Path) -> str:
    """A key for the benchmark's team, made with the operator CLI (the whole path is on)."""
    made = subprocess.run(
        python("-m", "fairgate", "keys", "create", "--team", "bench", "--json", "-c", str(config)),
        capture_output=True,
        check=True,
        text=True,
        timeout=120,
    )
    secret: str = json.loads(made.stdout)[0]["secret"]
    return secret
