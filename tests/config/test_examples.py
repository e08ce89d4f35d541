"""Every examples/*.yaml loads, so the examples cannot drift from the schema."""

from __future__ import annotations

from pathlib import Path

import pytest

from fairgate.config import load_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FILES = sorted(EXAMPLES.glob("*.yaml"))


def test_the_examples_are_there() -> None:
    names = {path.name for path in FILES}
    assert {"gateway.yaml", "minimal.yaml", "llama-server.yaml"} <= names


@pytest.mark.parametrize("path", FILES, ids=[path.name for path in FILES])
def test_example_loads(path: Path) -> None:
    cfg = load_config(path, env={})
    assert cfg.models
    for model in cfg.models:
        for upstream in model.upstreams:
            if upstream.key_file is not None:
                assert "change-me" in upstream.key_file.read()  # placeholders, not secrets


def test_gateway_example_has_the_full_shape() -> None:
    cfg = load_config(EXAMPLES / "gateway.yaml", env={})
    assert cfg.master_key_file is not None
    assert cfg.master_key_file.read().endswith("change-me")
    assert cfg.model("llama70b") is cfg.models[0]
    assert cfg.models[0].fallbacks == ("llama-3.1-8b",)
    assert [band.name for band in cfg.admission.bands] == ["platinum", "gold", "bronze"]
    assert sum(org.share for org in cfg.orgs) == 1.0
    assert cfg.orgs[0].teams == ("lab-nlp", "lab-vision")
    assert cfg.cache_isolation.key_file is not None
    assert cfg.fairshare.half_life == 168 * 3600.0
    assert cfg.landing.contact == "llm-support@example.org"
    assert cfg.trusted_proxies == ("10.0.0.5/32",)
    assert cfg.routes.metrics.allow == ("10.1.0.0/16",)
    assert cfg.routes.health.allow == ("127.0.0.0/8", "::1/128")


def test_minimal_example_is_one_model_on_one_local_engine() -> None:
    cfg = load_config(EXAMPLES / "minimal.yaml", env={})
    [model] = cfg.models
    [upstream] = model.upstreams
    assert upstream.url == "http://127.0.0.1:8000"


def test_llama_server_example_uses_the_llama_server_engine() -> None:
    cfg = load_config(EXAMPLES / "llama-server.yaml", env={})
    assert {model.engine for model in cfg.models} == {"llama-server"}
