"""The mapping sections: durations, strict scalars, store and state back ends."""

from __future__ import annotations

from pathlib import Path

import pytest

from fairgate.config import BreakerSettings, Logging, Store

from .conftest import MINIMAL, Load, Problems, with_minimal


def test_durations_are_strings_with_units_read_as_seconds(load: Load) -> None:
    cfg = load(
        with_minimal(
            """
        limits: {connect_timeout: 250ms, idle_timeout: 1m30s, total_timeout: 2h}
        proxy: {shutdown_grace: 0s}
        fairshare: {half_life: 7d}
        admission: {queue_ttl: 1.5s}
            """
        )
    )
    assert cfg.limits.connect_timeout == 0.25
    assert cfg.limits.idle_timeout == 90.0
    assert cfg.limits.total_timeout == 7200.0
    assert cfg.proxy.shutdown_grace == 0.0
    assert cfg.fairshare.half_life == 7 * 86400.0
    assert cfg.admission.queue_ttl == 1.5


def test_bad_durations_are_refused_with_the_reason(problems: Problems) -> None:
    found = problems(
        with_minimal(
            """
        limits:
          idle_timeout: 30
          total_timeout: 30 minutes
          connect_timeout: 0s
          headers_timeout: -5s
            """
        )
    )
    assert found == [
        "2:17: limits.idle_timeout: expected a duration such as 30s, 5m or 168h, got 30",
        "3:18: limits.total_timeout: not a duration: '30 minutes' "
        "(use e.g. 250ms, 30s, 5m, 168h, 7d)",
        "4:20: limits.connect_timeout: must be longer than 0s, got '0s'",
        "5:20: limits.headers_timeout: not a duration: '-5s' (use e.g. 250ms, 30s, 5m, 168h, 7d)",
    ]


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ("listen: {port: '8080'}", "listen.port: expected an integer, got '8080'"),
        ("listen: {port: true}", "listen.port: expected an integer, got true"),
        ("listen: {port: 80.0}", "listen.port: expected an integer, got 80.0"),
        ("listen: {port: 70000}", "listen.port: must be at most 65535, got 70000"),
        ("listen: {host: ''}", "listen.host: must not be empty"),
        ("limits: {max_body_bytes: 0}", "limits.max_body_bytes: must be at least 1, got 0"),
        ("limits: {max_tokens: -1}", "limits.max_tokens: must be at least 1, got -1"),
        ("proxy: {retries: -1}", "proxy.retries: must be at least 0, got -1"),
        ("logging: {json: 'yes'}", "logging.json: expected true or false, got 'yes'"),
        ("logging: {json: yes}", "logging.json: expected true or false, got 'yes'"),
        ("admission: {queue_size: .inf}", "admission.queue_size: expected an integer, got .inf"),
        ("listen: [0.0.0.0, 8080]", "listen: expected a mapping, got a list"),
    ],
)
def test_scalars_are_strict(problems: Problems, section: str, message: str) -> None:
    [found] = problems(section + "\n" + MINIMAL)
    assert found.split(": ", 1)[1] == message


def test_non_finite_numbers_are_refused(problems: Problems) -> None:
    found = problems("admission:\n  bands: [{name: g, ceiling: .nan}]\n" + MINIMAL)
    assert found == ["2:30: admission.bands[0].ceiling: expected a finite number, got .nan"]


def test_max_tokens_may_be_set_or_left_to_the_engine(load: Load) -> None:
    assert load("limits: {max_tokens: 4096}\n" + MINIMAL).limits.max_tokens == 4096
    assert load("limits: {max_tokens: null}\n" + MINIMAL).limits.max_tokens is None


def test_breaker_backoff_max_may_not_be_shorter_than_the_initial_backoff(
    problems: Problems,
) -> None:
    found = problems("breaker: {backoff_initial: 10s, backoff_max: 5s}\n" + MINIMAL)
    assert found == ["1:46: breaker.backoff_max: must not be shorter than breaker.backoff_initial"]
    assert BreakerSettings(backoff_initial=1.0, backoff_max=1.0).backoff_max == 1.0


def test_logging_json_is_a_plain_boolean_attribute(load: Load) -> None:
    cfg = load("logging: {level: debug, json: true}\n" + MINIMAL)
    assert cfg.logging.json is True
    assert cfg.logging.level == "debug"
    assert Logging().json is False


def test_store_defaults_to_sqlite_and_takes_exactly_one_source(
    load: Load, problems: Problems, tmp_path: Path
) -> None:
    assert Store().url == "sqlite:///fairgate.db"
    cfg = load("store: {url: 'postgresql://fairgate@db.internal/fairgate'}\n" + MINIMAL)
    assert cfg.store.url == "postgresql://fairgate@db.internal/fairgate"
    found = problems("store: {url: 'sqlite:///x.db', url_file: secrets/db.url}\n" + MINIMAL)
    assert found == [
        "1:42: store.url_file: secret file does not exist: " + str(tmp_path / "secrets/db.url"),
        "1:42: store.url_file: set store.url or store.url_file, not both",
    ]
    found = problems("store: {url: 'mysql://db/x'}\n" + MINIMAL)
    assert found == ["1:14: store.url: expected a sqlite:/// or postgresql:// URL"]


def test_a_store_url_with_a_password_is_refused_without_repeating_it(problems: Problems) -> None:
    found = problems("store: {url: 'postgresql://app:hunter2@db/fairgate'}\n" + MINIMAL)
    assert found == [
        "1:14: store.url: the URL holds a password: write the URL to a file and set store.url_file"
    ]
    assert "hunter2" not in "".join(found)


@pytest.mark.parametrize(
    "query", ["password=hunter2", "sslmode=require&PassWord=hunter2", "sslpassword=hunter2"]
)
def test_a_password_in_the_store_url_query_is_refused_like_an_inline_one(
    problems: Problems, query: str
) -> None:
    found = problems(f"store: {{url: 'postgresql://app@db/fairgate?{query}'}}\n" + MINIMAL)
    assert found == [
        "1:14: store.url: the URL holds a password: write the URL to a file and set store.url_file"
    ]
    assert "hunter2" not in "".join(found)


def test_redis_state_needs_a_url_file(problems: Problems) -> None:
    found = problems("state: {backend: redis}\n" + MINIMAL)
    assert found == [
        "1:8: state.url_file: required with backend 'redis' (a file holding the Redis URL), "
        "unless state.sentinels names the Sentinels that know the primary"
    ]
    found = problems("state: {backend: etcd}\n" + MINIMAL)
    assert found == ["1:18: state.backend: expected one of 'memory', 'redis', got 'etcd'"]


def test_sentinels_locate_the_redis_primary(load: Load) -> None:
    cfg = load(
        "state: {backend: redis, sentinels: ['10.0.0.5:26379', '[fd00::5]:26379'], "
        "service_name: fairgate}\n" + MINIMAL
    )
    assert cfg.state.sentinels == ("10.0.0.5:26379", "[fd00::5]:26379")
    assert cfg.state.service_name == "fairgate"
    assert cfg.state.url_file is None  # optional: the Sentinels say where the primary is


@pytest.mark.parametrize(
    ("state", "message"),
    [
        (
            "{backend: redis, sentinels: ['10.0.0.5:26379']}",
            "state.service_name: required with state.sentinels (the name the Sentinels monitor)",
        ),
        (
            "{backend: redis, sentinels: ['10.0.0.5'], service_name: f}",
            "state.sentinels[0]: '10.0.0.5' is not host:port (e.g. 10.0.0.5:26379)",
        ),
        (
            "{backend: redis, sentinels: ['a:1', 'a:1'], service_name: f}",
            "state.sentinels: a Sentinel is listed twice",
        ),
        (
            "{sentinels: ['a:1'], service_name: f}",
            "state.sentinels: Sentinels locate a Redis primary: set state.backend: redis",
        ),
        (
            "{service_name: f}",
            "state.service_name: only with state.sentinels",
        ),
    ],
)
def test_sentinel_settings_are_checked(problems: Problems, state: str, message: str) -> None:
    found = problems(f"state: {state}\n" + MINIMAL)
    assert [line.split(": ", 1)[1] for line in found] == [message]


def test_later_features_are_validated_now(load: Load, problems: Problems) -> None:
    cfg = load(
        with_minimal(
            """
        cache_isolation: {scope: team}
        landing: {contact: "https://help.example.org"}
        admission: {queue_size: 0, bands: [{name: gold, ceiling: 1.5}]}
            """
        )
    )
    assert cfg.cache_isolation.scope == "team"
    assert cfg.landing.contact == "https://help.example.org"
    assert cfg.admission.queue_size == 0
    assert cfg.admission.bands[0].name == "gold"
    assert cfg.admission.bands[0].ceiling == 1.5
    found = problems("cache_isolation: {scope: tenant}\n" + MINIMAL)
    assert found == [
        "1:26: cache_isolation.scope: expected one of 'org', 'team', 'key', 'none', "
        "got 'tenant' (did you mean 'team'?)"
    ]


def test_the_auth_section_has_safe_defaults_and_reads_durations(load: Load) -> None:
    defaults = load(MINIMAL).auth
    assert (defaults.key_cache_ttl, defaults.key_cache_size) == (30.0, 100_000)
    assert (defaults.miss_cache_ttl, defaults.miss_cache_size) == (30.0, 100_000)
    assert (defaults.failures_per_minute, defaults.failure_networks_max) == (60, 100_000)
    auth = load(
        with_minimal("auth: {key_cache_ttl: 5s, miss_cache_ttl: 1m, failures_per_minute: 0}\n")
    ).auth
    assert (auth.key_cache_ttl, auth.miss_cache_ttl, auth.failures_per_minute) == (5.0, 60.0, 0)


def test_the_auth_section_refuses_what_would_disable_its_protection(problems: Problems) -> None:
    found = problems(
        with_minimal(
            """
        auth:
          key_cache_ttl: 0s
          key_cache_size: 0
          miss_cache_ttl: 30
          failures_per_minute: -1
          failure_networks_max: 0
            """
        )
    )
    assert found == [
        "2:18: auth.key_cache_ttl: must be longer than 0s, got '0s'",
        "3:19: auth.key_cache_size: must be at least 1, got 0",
        "4:19: auth.miss_cache_ttl: expected a duration such as 30s, 5m or 168h, got 30",
        "5:24: auth.failures_per_minute: must be at least 0, got -1",
        "6:25: auth.failure_networks_max: must be at least 1, got 0",
    ]


def test_admission_bands_name_their_teams_and_the_default_band(load: Load) -> None:
    admission = load(
        with_minimal(
            """
        admission:
          default_band: gold
          kv_limit: 0.95
          replica_capacity: 64
          bands:
            - {name: platinum, ceiling: 1.5, teams: [lab-nlp]}
            - {name: gold, ceiling: 1.0}
            - {name: bronze, ceiling: 1.0, teams: [lab-chem, batch]}
            """
        )
    ).admission
    assert [(b.name, b.teams) for b in admission.bands] == [
        ("platinum", ("lab-nlp",)),
        ("gold", ()),
        ("bronze", ("lab-chem", "batch")),
    ]
    assert (admission.default_band, admission.kv_limit, admission.replica_capacity) == (
        "gold",
        0.95,
        64,
    )
    defaults = load(MINIMAL).admission
    assert (defaults.default_band, defaults.replica_capacity) == (None, None)
    assert defaults.kv_limit == 0.9


def test_admission_bands_that_would_invert_or_overlap_are_refused(problems: Problems) -> None:
    found = problems(
        with_minimal(
            """
        admission:
          bands:
            - {name: gold, ceiling: 1.0, teams: [lab-nlp]}
            - {name: bronze, ceiling: 1.2}
            """
        )
    )
    assert found == [
        "3:5: admission.bands: band 'bronze' has a higher ceiling than 'gold' above it"
    ]
    found = problems(
        with_minimal(
            """
        admission:
          bands:
            - {name: gold, ceiling: 1.0, teams: [lab-nlp]}
            - {name: bronze, ceiling: 0.8, teams: [lab-nlp]}
          kv_limit: 0
            """
        )
    )
    assert found == [
        "3:5: admission.bands: team 'lab-nlp' is in bands 'gold' and 'bronze'",
        "5:13: admission.kv_limit: must be greater than 0, got 0",
    ]
    found = problems(
        with_minimal("admission: {default_band: silver, bands: [{name: gold, ceiling: 1.0}]}\n")
    )
    assert found == ["1:27: admission.default_band: no band is called 'silver'"]


def test_public_url_is_an_http_base_url_without_a_trailing_slash(load: Load) -> None:
    assert load(MINIMAL).public_url is None
    cfg = load("public_url: 'HTTPS://LLM.Example.org/gw/'\n" + MINIMAL)
    assert cfg.public_url == "https://llm.example.org/gw"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("javascript:alert(1)", "must start with http:// or https://"),
        ("ftp://files.example.org", "must start with http:// or https://"),
        ("https://", "has no host"),
        ("https://ops:hunter2@llm.example.org", "must not contain credentials"),
        ("https://llm.example.org/?a=1", "must not have a query or fragment"),
        ("https://llm.example.org/#x", "must not have a query or fragment"),
        ("https://llm.example.org:99999", "has an invalid port"),
    ],
)
def test_a_public_url_people_could_not_open_is_refused_with_its_place(
    problems: Problems, value: str, reason: str
) -> None:
    (found,) = problems(f"public_url: '{value}'\n" + MINIMAL)
    assert found.startswith("1:13: public_url: ") and reason in found
    assert "hunter2" not in found


def test_fairshare_reclaim_after_is_on_by_default_and_null_turns_it_off(
    load: Load, problems: Problems
) -> None:
    assert load(MINIMAL).fairshare.reclaim_after == 5.0
    assert load(with_minimal("fairshare: {reclaim_after: 750ms}\n")).fairshare.reclaim_after == 0.75
    assert load(with_minimal("fairshare: {reclaim_after: null}\n")).fairshare.reclaim_after is None
    assert problems(with_minimal("fairshare: {reclaim_after: 0s}\n")) == [
        "1:28: fairshare.reclaim_after: must be longer than 0s, got '0s'"
    ]
