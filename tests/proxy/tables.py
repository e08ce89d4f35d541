"""A model table built from a real configuration file, with the gateway's engine adapters."""

from __future__ import annotations

from pathlib import Path

from fairgate.config import load_config
from fairgate.engines import adapter_for
from fairgate.proxy.endpoints import EndpointTable


def endpoint_table(config: str, directory: Path) -> EndpointTable:
    """The table of ``config`` (YAML text), written to ``directory`` and loaded."""
    path = directory / "gateway.yaml"
    path.write_text(config, encoding="utf-8")
    loaded = load_config(path, env={})
    adapters = {kind: adapter_for(kind) for kind in {m.engine for m in loaded.models}}
    return EndpointTable(loaded.models, adapters)
