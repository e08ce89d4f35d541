"""Whole processes: simulated engines and the gateway, started per test, stopped after.

def test_x(start_sim, start_gateway):
    sim = start_sim("--speed", "0")
    gw = start_gateway(models=[model("m", sim)])
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="unused")
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess

StartSim = Callable[..., SimProcess]
StartGateway = Callable[..., GatewayProcess]


def model(name: str, *sims: SimProcess, **extra: Any) -> dict[str, Any]:
    """A model entry whose upstreams are the given simulators (named r0, r1, …)."""
    entry: dict[str, Any] = {"name": name, "engine": "vllm"}
    entry.update(extra)
    entry.setdefault("upstreams", [{"name": f"r{i}", "url": sim.url} for i, sim in enumerate(sims)])
    return entry


def write_config(directory: Path, models: list[dict[str, Any]], **sections: Any) -> Path:
    """A gateway config on free loopback ports; JSON is valid YAML."""
    document: dict[str, Any] = {
        "listen": {"host": "127.0.0.1", "port": 0},
        "admin_listen": {"host": "127.0.0.1", "port": 0},
        "health": {"interval": "1s", "timeout": "1s"},
        "models": models,
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(document.get(key), dict):
            document[key] = {**document[key], **value}
        else:
            document[key] = value
    path = directory / "gateway.yaml"
    path.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2))
    return path


@pytest.fixture
def start_sim() -> Iterator[StartSim]:
    started: list[SimProcess] = []

    def start(*args: str) -> SimProcess:
        sim = SimProcess(*args).start()
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.stop()


@pytest.fixture
def start_gateway(tmp_path: Path) -> Iterator[StartGateway]:
    started: list[GatewayProcess] = []

    def start(
        models: list[dict[str, Any]], *args: str, env: dict[str, str] | None = None, **sections: Any
    ) -> GatewayProcess:
        directory = tmp_path / f"gw{len(started)}"
        directory.mkdir()
        gateway = GatewayProcess(write_config(directory, models, **sections), *args, env=env)
        gateway.start()
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        gateway.stop()
