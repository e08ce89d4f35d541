"""FAIRGATE_ environment overrides of scalar settings."""

from __future__ import annotations

from pathlib import Path

from .conftest import MINIMAL, Load, Problems


def test_overrides_set_scalars_of_sections_with_yaml_typed_values(load: Load) -> None:
    cfg = load(
        "listen: {port: 8080}\n" + MINIMAL,
        env={
            "FAIRGATE_LISTEN__PORT": "9000",
            "FAIRGATE_LIMITS__IDLE_TIMEOUT": "10s",
            "FAIRGATE_LOGGING__JSON": "true",
            "FAIRGATE_ADMIN_LISTEN__HOST": "0.0.0.0",
            "FAIRGATE_LIMITS__MAX_TOKENS": "2048",
            "fairgate_listen__host": "ignored: not the FAIRGATE_ prefix",
        },
    )
    assert cfg.listen.port == 9000
    assert cfg.listen.host == "0.0.0.0"
    assert cfg.limits.idle_timeout == 10.0
    assert cfg.logging.json is True
    assert cfg.admin_listen.host == "0.0.0.0"
    assert cfg.admin_listen.port == 8081
    assert cfg.limits.max_tokens == 2048


def test_an_override_wins_over_the_file_and_null_restores_the_default(load: Load) -> None:
    text = "limits: {max_tokens: 100, max_n: 2}\n" + MINIMAL
    cfg = load(text, env={"FAIRGATE_LIMITS__MAX_TOKENS": "null", "FAIRGATE_LIMITS__MAX_N": "4"})
    assert cfg.limits.max_tokens is None
    assert cfg.limits.max_n == 4


def test_a_top_level_secret_reference_can_be_overridden(load: Load, tmp_path: Path) -> None:
    (tmp_path / "master.key").write_text("example-master\n")
    cfg = load(MINIMAL, env={"FAIRGATE_MASTER_KEY_FILE": "master.key"})
    assert cfg.master_key_file is not None
    assert cfg.master_key_file.path == tmp_path / "master.key"
    assert cfg.master_key_file.read() == "example-master"


def test_bad_override_values_are_reported_at_the_variable(problems: Problems) -> None:
    found = problems(
        MINIMAL,
        env={
            "FAIRGATE_LISTEN__PORT": "abc",
            "FAIRGATE_LIMITS__IDLE_TIMEOUT": "soon",
            "FAIRGATE_LOGGING__JSON": "yes",
        },
    )
    assert found == [
        "env:FAIRGATE_LIMITS__IDLE_TIMEOUT: limits.idle_timeout: not a duration: 'soon' "
        "(use e.g. 250ms, 30s, 5m, 168h, 7d)",
        "env:FAIRGATE_LISTEN__PORT: listen.port: expected an integer, got 'abc'",
        "env:FAIRGATE_LOGGING__JSON: logging.json: expected true or false, got 'yes'",
    ]


def test_unknown_and_unoverridable_keys_name_the_variable(problems: Problems) -> None:
    found = problems(
        MINIMAL,
        env={
            "FAIRGATE_LISTEN__PROT": "1",
            "FAIRGATE_LIMTS__MAX_N": "1",
            "FAIRGATE_MODELS__NAME": "x",
            "FAIRGATE_ADMISSION__BANDS": "[]",
            "FAIRGATE_LIMITS__MAX_N__X": "1",
            "FAIRGATE_LISTEN_PORT": "9000",
        },
    )
    assert found == [
        "env:FAIRGATE_ADMISSION__BANDS: 'admission.bands' is not a scalar setting: not overridable",
        "env:FAIRGATE_LIMITS__MAX_N__X: expected FAIRGATE_<SECTION>__<KEY> with one "
        "double underscore",
        "env:FAIRGATE_LIMTS__MAX_N: unknown section 'limts' (did you mean 'limits'?)",
        "env:FAIRGATE_LISTEN_PORT: not an override: did you mean FAIRGATE_LISTEN__PORT?",
        "env:FAIRGATE_LISTEN__PROT: unknown key 'prot' in 'listen' (did you mean 'port'?)",
        "env:FAIRGATE_MODELS__NAME: 'models' is a list: not overridable",
    ]


def test_other_fairgate_variables_are_not_overrides(load: Load) -> None:
    env = {"FAIRGATE_CONFIG": "/elsewhere.yaml", "FAIRGATE_TEST_PG_URL": "postgresql://x"}
    assert load(MINIMAL, env=env).listen.port == 8080


def test_file_errors_and_override_errors_are_reported_together(problems: Problems) -> None:
    found = problems("proxy: {retries: many}\n" + MINIMAL, env={"FAIRGATE_LISTEN__PORT": "-1"})
    assert found == [
        "1:18: proxy.retries: expected an integer, got 'many'",
        "env:FAIRGATE_LISTEN__PORT: listen.port: must be at least 0, got -1",
    ]


def test_an_override_fills_a_section_the_file_left_empty(load: Load) -> None:
    cfg = load("health:\n" + MINIMAL, env={"FAIRGATE_HEALTH__INTERVAL": "1s"})
    assert cfg.health.interval == 1.0
    assert cfg.health.timeout == 2.0
