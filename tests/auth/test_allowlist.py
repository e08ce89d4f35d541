"""Model allowlists, decided per model: canonical names and aliases stand for the same model."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from fairgate.auth import ModelResolver, allowed_models, allows
from fairgate.config import Config, load_config
from fairgate.core.principal import Principal

CONFIG = """\
models:
  - name: llama-3.3-70b
    aliases: [llama70b, big]
    upstreams: [{name: a, url: "http://127.0.0.1:9001"}]
  - name: mistral-7b
    aliases: [mistral]
    upstreams: [{name: b, url: "http://127.0.0.1:9002"}]
  - name: qwen-32b
    upstreams: [{name: c, url: "http://127.0.0.1:9003"}]
"""


@pytest.fixture
def config(tmp_path: Path) -> Config:
    path = tmp_path / "gateway.yaml"
    path.write_text(CONFIG, encoding="utf-8")
    return load_config(path, env={})


@pytest.fixture
def resolver(config: Config) -> ModelResolver:
    """What the gateway builds: every configured name and alias → canonical name."""
    return ModelResolver({n: m.name for m in config.models for n in (m.name, *m.aliases)})


def may_request(
    config: Config, resolver: ModelResolver, key_list: list[str] | None, requested: str
) -> bool:
    """The proxy's decision: the requested name resolves to a model, then ``allows`` decides."""
    principal = Principal("k", "o", "t", models=allowed_models(None, key_list, resolver))
    model = config.model(requested)
    assert model is not None
    return allows(principal, model.name)


@pytest.mark.parametrize(
    "listed", ["llama-3.3-70b", "llama70b"], ids=["list-canonical", "list-alias"]
)
@pytest.mark.parametrize(
    "requested", ["llama-3.3-70b", "big"], ids=["request-canonical", "request-alias"]
)
def test_every_name_of_a_listed_model_is_allowed(
    config: Config, resolver: ModelResolver, listed: str, requested: str
) -> None:
    assert may_request(config, resolver, [listed], requested)
    # and the decision is per model: the other models stay hidden, by any of their names
    for other in ("mistral-7b", "mistral", "qwen-32b"):
        assert not may_request(config, resolver, [listed], other)


def test_an_absent_list_allows_everything_and_an_empty_one_nothing(
    config: Config, resolver: ModelResolver
) -> None:
    for name in ("llama-3.3-70b", "big", "mistral", "qwen-32b"):
        assert may_request(config, resolver, None, name)
        assert not may_request(config, resolver, [], name)
    assert allowed_models(None, None, resolver) is None
    assert allowed_models([], None, resolver) == frozenset()
    assert allowed_models(None, [], resolver) == frozenset()


def test_a_principal_gets_what_both_team_and_key_allow(resolver: ModelResolver) -> None:
    team = ["big", "mistral"]
    assert allowed_models(team, None, resolver) == frozenset({"llama-3.3-70b", "mistral-7b"})
    assert allowed_models(team, ["mistral-7b", "qwen-32b"], resolver) == frozenset({"mistral-7b"})
    assert allowed_models(None, ["qwen-32b"], resolver) == frozenset({"qwen-32b"})
    # a key cannot widen what its team allows
    assert allowed_models(["qwen-32b"], ["llama70b"], resolver) == frozenset()


def test_an_unknown_name_is_ignored_with_a_warning(
    resolver: ModelResolver, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="fairgate.auth"):
        assert allowed_models(None, ["retired-model", "mistral"], resolver) == frozenset(
            {"mistral-7b"}
        )
        # a list of only unknown names allows nothing, never everything
        assert allowed_models(None, ["retired-model"], resolver) == frozenset()
    assert "retired-model" in caplog.text
