"""load_config end to end: defaults, the Config interface, and reporting every problem at once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from fairgate.config import ConfigError, Diagnostic, load_config

from .conftest import MINIMAL, Load, Problems, WriteConfig


def test_minimal_file_gets_every_documented_default(load: Load) -> None:
    cfg = load(MINIMAL)
    assert (cfg.listen.host, cfg.listen.port) == ("0.0.0.0", 8080)
    assert (cfg.admin_listen.host, cfg.admin_listen.port) == ("127.0.0.1", 8081)
    limits = cfg.limits
    assert limits.max_body_bytes == 32 * 1024 * 1024
    assert limits.max_header_bytes == 64 * 1024
    assert (limits.connect_timeout, limits.headers_timeout) == (5.0, 60.0)
    assert (limits.first_token_timeout, limits.idle_timeout, limits.total_timeout) == (
        120.0,
        30.0,
        1800.0,
    )
    assert limits.max_response_bytes == 64 * 1024 * 1024
    assert limits.stream_buffer_bytes == 1024 * 1024
    assert (limits.max_n, limits.max_tokens, limits.max_grammar_bytes) == (8, None, 64 * 1024)
    assert (limits.client_head_timeout, limits.client_body_timeout) == (10.0, 60.0)
    assert limits.slow_reader_timeout == 30.0
    assert (cfg.proxy.retries, cfg.proxy.shutdown_grace) == (2, 30.0)
    assert (cfg.health.interval, cfg.health.timeout) == (5.0, 2.0)
    assert (cfg.breaker.failures, cfg.breaker.backoff_initial, cfg.breaker.backoff_max) == (
        3,
        1.0,
        60.0,
    )
    assert (cfg.logging.level, cfg.logging.json) == ("info", False)
    assert cfg.master_key_file is None
    assert (cfg.store.url, cfg.store.url_file) == ("sqlite:///fairgate.db", None)
    assert (cfg.state.backend, cfg.state.url_file) == ("memory", None)
    assert cfg.fairshare.half_life == 7 * 24 * 3600.0
    assert (cfg.admission.queue_size, cfg.admission.queue_ttl, cfg.admission.bands) == (
        1000,
        30.0,
        (),
    )
    assert (cfg.cache_isolation.scope, cfg.cache_isolation.key_file) == ("org", None)
    assert cfg.landing.contact is None
    assert (cfg.pools, cfg.orgs) == ((), ())
    model = cfg.models[0]
    assert (model.name, model.upstream_model, model.engine, model.model_class) == (
        "m",
        "m",
        "vllm",
        "interactive",
    )
    assert (model.pool, model.aliases, model.fallbacks) == (None, (), ())
    assert (
        model.cost.input_per_mtok == model.cost.output_per_mtok == model.cost.cached_per_mtok == 0
    )
    assert model.upstreams[0].weight == 1


def test_config_remembers_its_file_and_finds_models_by_name_or_alias(
    write_config: WriteConfig,
) -> None:
    path = write_config(
        """
        models:
          - name: big
            aliases: [large, huge]
            upstreams: [{name: u, url: "http://127.0.0.1:8000"}]
          - name: small
            upstreams: [{name: u, url: "http://127.0.0.1:8001"}]
        """
    )
    cfg = load_config(str(path))
    assert cfg.path == path
    big = cfg.models[0]
    assert cfg.model("big") is big
    assert cfg.model("huge") is big
    assert cfg.model("small") is cfg.models[1]
    assert cfg.model("meta-llama/big") is None


def test_config_is_frozen(load: Load) -> None:
    cfg = load(MINIMAL)
    with pytest.raises(ValidationError):
        cfg.listen.port = 1  # type: ignore[misc]
    with pytest.raises(ValidationError):
        cfg.models = ()  # type: ignore[misc]


def test_every_problem_is_reported_in_one_run_sorted_by_position(problems: Problems) -> None:
    found = problems(
        """
        listen: {port: high}
        proxy: {retires: 3}
        models:
          - name: m
            engine: vllm
            pool: nowhere
            upstreams:
              - {name: u, url: "ftp://example.org"}
        logging: {level: loud}
        proxy: {}
        """
    )
    assert found == [
        "1:16: listen.port: expected an integer, got 'high'",
        "2:9: unknown key 'retires' in 'proxy' (did you mean 'retries'?)",
        "6:11: unknown pool 'nowhere': no pools are declared",
        "8:24: models[0].upstreams[0].url: upstream URL must start with http:// or https://, "
        "got 'ftp://example.org'",
        "9:18: logging.level: expected one of 'debug', 'info', 'warning', 'error', got 'loud'",
        "10:1: duplicate key 'proxy' (first defined at 2:1)",
    ]


def test_diagnostics_carry_the_file_name_as_given(write_config: WriteConfig) -> None:
    path = write_config("listen: {port: x}\n" + MINIMAL)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    [diagnostic] = info.value.diagnostics
    assert diagnostic == Diagnostic(str(path), 1, 16, "listen.port: expected an integer, got 'x'")
    assert str(diagnostic) == f"{path}:1:16: listen.port: expected an integer, got 'x'"
    assert str(info.value) == str(diagnostic)


def test_models_are_required(problems: Problems) -> None:
    assert problems("listen: {port: 9000}\n") == ["1:1: missing required key 'models'"]
    assert problems("models: []\n") == ["1:9: models: needs at least one entry"]


def test_a_missing_required_key_points_at_the_entry_that_lacks_it(problems: Problems) -> None:
    found = problems(
        """
        models:
          - name: m
            upstreams:
              - {url: "http://127.0.0.1:8000"}
        """
    )
    assert found == ["4:9: missing required key 'name' in 'models[0].upstreams[0]'"]


def test_an_empty_section_means_its_defaults(load: Load) -> None:
    cfg = load("limits:\n  # max_n: 4\npools:\n" + MINIMAL)
    assert cfg.limits.max_n == 8
    assert cfg.pools == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "1:1: the configuration is empty"),
        ("# only a comment\n", "1:1: the configuration is empty"),
        ("- a\n- b\n", "1:1: the configuration is not a mapping of sections"),
    ],
)
def test_a_file_without_sections_is_refused(problems: Problems, text: str, message: str) -> None:
    assert problems(text) == [message]


def test_path_is_not_a_key_of_the_file(problems: Problems) -> None:
    assert problems("path: /etc/passwd\n" + MINIMAL) == ["1:1: unknown key 'path'"]


def test_a_file_that_cannot_be_read_is_one_diagnostic(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(missing)
    assert [str(d) for d in info.value.diagnostics] == [f"{missing}: configuration file not found"]
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"listen: \xff\xfe\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(binary)
    huge = tmp_path / "huge.yaml"
    huge.write_text(MINIMAL + "#" * (4 * 1024 * 1024))
    with pytest.raises(ConfigError, match="larger than 4 MiB"):
        load_config(huge)


def test_values_are_never_interpolated(load: Load) -> None:
    cfg = load(
        """
        landing: {contact: "${HOME} and $(id) and {{ env.USER }}"}
        models:
          - name: "${MODEL}"
            upstreams: [{name: u, url: "http://127.0.0.1:8000"}]
        """
    )
    assert cfg.landing.contact == "${HOME} and $(id) and {{ env.USER }}"
    assert cfg.models[0].name == "${MODEL}"


_KNOWN_KEYS = [
    "listen",
    "port",
    "models",
    "name",
    "upstreams",
    "url",
    "pools",
    "pool",
    "orgs",
    "share",
    "teams",
    "fallbacks",
    "aliases",
    "limits",
    "idle_timeout",
    "key_file",
    "master_key_file",
    "class",
    "x",
]
# Any code point, lone surrogates included: JSON and YAML escapes ("\\ud800") reach the
# loader as such characters, and every message quoting them must still be printable.
_ANY_TEXT = st.text(st.characters(categories=["L", "M", "N", "P", "S", "Z", "C"]), max_size=12)
_KEYS = st.sampled_from(_KNOWN_KEYS) | _ANY_TEXT
_SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | _ANY_TEXT
_TREES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=5),
    max_leaves=25,
)
_OVERRIDES = st.dictionaries(
    st.sampled_from(
        [
            "FAIRGATE_LISTEN__PORT",
            "FAIRGATE_LISTEN__HOST",
            "FAIRGATE_MASTER_KEY_FILE",
            "FAIRGATE_LIMITS__IDLE_TIMEOUT",
            "FAIRGATE_LISTEN_PORT",
            "FAIRGATE_NOPE__X",
        ]
    ),
    _ANY_TEXT,
    max_size=3,
)


def _assert_positioned_and_printable(error: ConfigError, path: Path) -> None:
    assert error.diagnostics
    for d in error.diagnostics:
        assert (d.file == str(path) and d.line >= 1) or d.file.startswith("env:FAIRGATE_")
    # What check-config prints and the server logs: it must encode.
    str(error).encode("utf-8")


@pytest.mark.fuzz
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=st.dictionaries(_KEYS, _TREES, max_size=6), env=_OVERRIDES)
@example(tree={"models": [{"name": "m", "upstreams": [{"key_file": "\ud800"}]}]}, env={})
@example(tree={"\udcff": 1, "listen": {"\ud800x": 1}}, env={"FAIRGATE_LISTEN__HOST": "\udc80"})
def test_any_tree_is_either_a_config_or_a_config_error(
    tmp_path: Path, tree: object, env: dict[str, str]
) -> None:
    path = tmp_path / "fuzz.yaml"
    path.write_text(json.dumps(tree, allow_nan=True), encoding="utf-8")  # JSON is YAML
    try:
        load_config(path, env=env)
    except ConfigError as error:
        _assert_positioned_and_printable(error, path)


_YAML_PIECES = st.sampled_from(
    [
        "models:",
        "\n",
        "\n  ",
        "- ",
        "name: ",
        "upstreams: ",
        "url: ",
        "key_file: ",
        "listen: ",
        "port: ",
        "{",
        "}",
        "[",
        "]",
        ", ",
        ": ",
        '"',
        "'",
        '"\\ud800"',
        '"\\udcff\\u0000"',
        "&a ",
        "*a",
        "!!python/object ",
        "<<: ",
        "? ",
        "|",
        ">-",
        "#",
        "---",
        "...",
        "%YAML 1.2",
        "\t",
        "\r",
        "\ufeff",
        "\x00",
        "\x85",
        "\u2028",
        "http://127.0.0.1:8000",
        "1e999",
        ".nan",
        "0x1F",
        "0o7",
    ]
)


@pytest.mark.fuzz
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pieces=st.lists(_YAML_PIECES | _ANY_TEXT, max_size=30))
@example(pieces=["models:", "\n", "- ", "name: ", '"\\ud800"'])
def test_any_text_is_either_a_config_or_a_config_error(tmp_path: Path, pieces: list[str]) -> None:
    path = tmp_path / "fuzz.yaml"
    # Lone surrogates cannot be UTF-8 on disk: written as the bytes a broken encoder makes.
    path.write_bytes("".join(pieces).encode("utf-8", "surrogatepass"))
    try:
        load_config(path, env={})
    except ConfigError as error:
        assert error.diagnostics
        for d in error.diagnostics:
            assert d.file == str(path)
            assert d.line >= 1 or d.message.startswith("configuration file is not UTF-8")
        str(error).encode("utf-8")
