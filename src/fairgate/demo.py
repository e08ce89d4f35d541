"""``fairgate demo``: two simulated engines, the gateway in front of them, a sample call.

Everything runs on loopback ports chosen by the system; the configuration is
written to a directory of its own (``.demo/`` by default) so it can be read and
reused with ``fairgate serve -c .demo/gateway.yaml`` while the engines run.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import signal
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson

from fairgate.config import load_config
from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess
from fairgate.tenancy import open_tenancy
from fairgate.tenancy.actor import Actor

__all__ = ["DEMO_MODEL", "DEMO_TEAM", "run_demo"]

DEMO_MODEL = "demo-llama"
DEMO_TEAM = "demo-team"
_UPSTREAM_MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _config(sims: list[SimProcess]) -> str:
    upstreams = "\n".join(
        f'      - {{name: sim{i + 1}, url: "{sim.url}"}}' for i, sim in enumerate(sims)
    )
    return f"""# Written by `fairgate demo`: two simulated vLLM engines behind one gateway.
listen: {{host: 127.0.0.1, port: 0}}
admin_listen: {{host: 127.0.0.1, port: 0}}
health: {{interval: 2s, timeout: 1s}}
store: {{url: "sqlite:///fairgate.db"}}
cache_isolation: {{scope: org, key_file: cache-salt.key}}
orgs:
  - {{name: demo-org, share: 1.0, teams: [{DEMO_TEAM}]}}
pools:
  - {{name: demo-pool, capacity: 16}}
models:
  - name: {DEMO_MODEL}
    aliases: [llama8b]
    upstream_model: {_UPSTREAM_MODEL}
    engine: vllm
    pool: demo-pool
    cost: {{input_per_mtok: 0.002, output_per_mtok: 0.02}}
    upstreams:
{upstreams}
"""


def _post(url: str, payload: dict[str, object], key: str) -> bytes:
    request = urllib.request.Request(  # noqa: S310 - a loopback URL the demo started itself
        url,
        data=orjson.dumps(payload),
        headers={"content-type": "application/json", "authorization": f"Bearer {key}"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
        body: bytes = response.read()
        return body


async def _new_key(config: Path) -> str:
    """A key for the demo team, made through the same service layer as ``fairgate keys create``."""
    async with open_tenancy(load_config(config)) as tenancy:
        made = await tenancy.keys.create(Actor.operator("demo"), team=DEMO_TEAM, name="demo")
        return made.secret


@contextlib.contextmanager
def _running(directory: Path) -> Iterator[tuple[GatewayProcess, list[SimProcess], str]]:
    sim_args = ("--model", _UPSTREAM_MODEL, "--tokens-per-second", "40", "--ttft", "0.05")
    with SimProcess(*sim_args) as sim1, SimProcess(*sim_args) as sim2:
        directory.mkdir(parents=True, exist_ok=True)
        config = directory / "gateway.yaml"
        salt_key = directory / "cache-salt.key"
        if not salt_key.exists():
            salt_key.write_text(secrets.token_urlsafe(32))
            salt_key.chmod(0o600)
        config.write_text(_config([sim1, sim2]))
        key = asyncio.run(_new_key(config))
        with GatewayProcess(config) as gateway:
            yield gateway, [sim1, sim2], key


def run_demo(directory: Path, *, once: bool, say: Callable[[str], None] = print) -> int:
    """Start the demo, make a sample call, then wait for Ctrl-C (or return at once)."""
    with _running(directory) as (gateway, sims, key):
        say(f"simulated engines: {sims[0].url}  {sims[1].url}")
        say(f"gateway:           {gateway.url}  (admin {gateway.admin_url})")
        say(f"configuration:     {directory / 'gateway.yaml'}")
        say(f"a key for team {DEMO_TEAM} (shown once; the store keeps only its hash):")
        say(f"  {key}")
        question = {
            "model": DEMO_MODEL,
            "max_tokens": 12,
            "messages": [{"role": "user", "content": "Say hello to fairgate."}],
        }
        started = time.monotonic()
        answer = orjson.loads(_post(gateway.url + "/v1/chat/completions", question, key))
        took = time.monotonic() - started
        say("")
        say(f"sample call: POST {gateway.url}/v1/chat/completions  ({took * 1000:.0f} ms)")
        say(f"  answer: {answer['choices'][0]['message']['content']!r}")
        say(f"  usage:  {answer['usage']}")
        say("")
        say("try it yourself:")
        say(f"  curl -s {gateway.url}/v1/chat/completions -H 'content-type: application/json' \\")
        say(f"    -H 'authorization: Bearer {key}' \\")
        say(
            f'    -d \'{{"model": "{DEMO_MODEL}", "messages": [{{"role": "user", '
            '"content": "hi"}], "stream": true}\''
        )
        say(
            f"  python -c \"import openai; c = openai.OpenAI(base_url='{gateway.url}/v1', "
            f"api_key='{key}'); print(c.chat.completions.create(model='{DEMO_MODEL}', "
            "messages=[{'role': 'user', 'content': 'hi'}]).choices[0].message.content)\""
        )
        say(f"  curl -s {gateway.admin_url}/metrics | grep fairgate_requests")
        if once:
            return 0
        say("")
        say("running; press Ctrl-C to stop")
        _wait_for_interrupt()
    return 0


def _wait_for_interrupt() -> None:
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
