"""Pools, organisations, models and upstreams: their own values."""

from __future__ import annotations

import pytest

from fairgate.config import Limits, Model, Upstream

from .conftest import Load, Problems


def one_model(**fields: str) -> str:
    """A configuration with one model whose keys are ``fields`` plus one upstream."""
    extra = "".join(f"    {key}: {value}\n" for key, value in fields.items())
    upstream = '    upstreams: [{name: u, url: "http://127.0.0.1:8000"}]\n'
    return "models:\n  - name: m\n" + extra + upstream


def one_upstream(url: str) -> str:
    return f'models:\n  - name: m\n    upstreams:\n      - {{name: u, url: "{url}"}}\n'


def test_a_complete_model_is_read_as_written(load: Load) -> None:
    cfg = load(
        """
        pools: [{name: b300, capacity: 256}]
        models:
          - name: llama-3.3-70b
            aliases: [llama70b, l70]
            upstream_model: meta-llama/Llama-3.3-70B-Instruct
            engine: llama-server
            pool: b300
            class: batch
            cost: {input_per_mtok: 0.02, output_per_mtok: 0.2, cached_per_mtok: 0}
            upstreams:
              - {name: gpu01, url: "https://Engine.Example.org:8443/v1/", weight: 3}
        """
    )
    model = cfg.models[0]
    assert model.aliases == ("llama70b", "l70")
    assert model.upstream_model == "meta-llama/Llama-3.3-70B-Instruct"
    assert (model.engine, model.pool, model.model_class) == ("llama-server", "b300", "batch")
    assert (model.cost.input_per_mtok, model.cost.output_per_mtok) == (0.02, 0.2)
    assert model.cost.cached_per_mtok == 0.0
    upstream = model.upstreams[0]
    assert upstream.url == "https://engine.example.org:8443/v1"
    assert upstream.weight == 3
    assert upstream.key_file is None
    assert cfg.pools[0].capacity == 256


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://user:secret@10.0.0.1:8000", "must not contain credentials: use key_file"),
        ("http://10.0.0.1:8000/?token=x", "must not have a query string"),
        ("http://10.0.0.1:8000/?", "must not have a query string"),
        ("http://10.0.0.1:8000/#frag", "must not have a fragment"),
        ("ftp://10.0.0.1", "must start with http:// or https://"),
        ("10.0.0.1:8000", "must start with http:// or https://"),
        ("file:///etc/passwd", "must start with http:// or https://"),
        ("http://:8000", "has no host"),
        ("http://10.0.0.1:99999", "has an invalid port"),
    ],
)
def test_upstream_urls_are_plain_http_endpoints(problems: Problems, url: str, message: str) -> None:
    [found] = problems(one_upstream(url))
    assert found.startswith("4:24: models[0].upstreams[0].url: upstream URL ")
    assert message in found
    assert "secret" not in found.replace("secret file", "")


def test_upstream_url_is_normalised(load: Load) -> None:
    cfg = load(one_upstream("HTTP://[::1]:8000//"))
    assert cfg.models[0].upstreams[0].url == "http://[::1]:8000"
    assert Upstream(name="u", url="http://h:1/").url == "http://h:1"


@pytest.mark.parametrize(
    ("yaml", "position", "message"),
    [
        ("pools: [{name: p, capacity: 0}]", "1:29", "pools[0].capacity: must be at least 1, got 0"),
        (
            "pools: [{name: p, capacity: 100001}]",
            "1:29",
            "pools[0].capacity: must be at most 100000, got 100001",
        ),
        ("orgs: [{name: o, share: 0}]", "1:25", "orgs[0].share: must be greater than 0, got 0"),
        ("orgs: [{name: o, share: 1.5}]", "1:25", "orgs[0].share: must be at most 1, got 1.5"),
        ("orgs: [{name: o, share: -.inf}]", "1:25", "orgs[0].share: expected a finite number"),
        ("orgs: [{name: o, share: 0.5, teams: lab}]", "1:37", "orgs[0].teams: expected a list"),
    ],
)
def test_pool_and_org_values_are_in_range(
    problems: Problems, yaml: str, position: str, message: str
) -> None:
    models = one_model(pool="p") if yaml.startswith("pools") else one_model()
    found = problems(yaml + "\n" + models)
    assert len(found) == 1
    assert found[0].startswith(f"{position}: {message}")


def test_pool_capacity_bounds_are_inclusive(load: Load) -> None:
    cfg = load(
        "pools: [{name: a, capacity: 1}, {name: b, capacity: 100000}]\n" + one_model(pool="a")
    )
    assert [pool.capacity for pool in cfg.pools] == [1, 100000]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"engine": "tgi"}, "models[0].engine: expected one of 'vllm', 'llama-server', 'openai'"),
        ({"class": "realtime"}, "models[0].class: expected one of 'interactive', 'batch'"),
        ({"cost": "{output_per_mtok: -1}"}, "models[0].cost.output_per_mtok: must be at least 0"),
        ({"cost": "{output_per_mtok: .nan}"}, "models[0].cost.output_per_mtok: expected a finite"),
        (
            {"aliases": "[' padded ']"},
            "models[0].aliases[0]: must not start or end with whitespace",
        ),
        ({"upstream_model": "''"}, "models[0].upstream_model: must not be empty"),
        ({"fallbacks": "other"}, "models[0].fallbacks: expected a list, got 'other'"),
        ({"model_class": "batch"}, "unknown key 'model_class' in 'models[0]' (did you mean"),
    ],
)
def test_model_values_are_checked(problems: Problems, fields: dict[str, str], message: str) -> None:
    [found] = problems(one_model(**fields))
    assert found.split(": ", 1)[1].startswith(message)


def test_upstream_weight_is_bounded(problems: Problems) -> None:
    found = problems(
        'models:\n  - name: m\n    upstreams:\n      - {name: u, url: "http://h", weight: 0}\n'
    )
    assert found == ["4:44: models[0].upstreams[0].weight: must be at least 1, got 0"]


def test_a_model_needs_an_upstream_or_a_deploy_profile(problems: Problems) -> None:
    assert problems("models:\n  - name: m\n    upstreams: []\n") == [
        "2:5: models[0]: give upstreams (at least one) or deploy"
    ]
    assert problems("models:\n  - name: m\n") == [
        "2:5: models[0]: give upstreams (at least one) or deploy"
    ]


def test_python_code_builds_models_by_field_name_with_durations_in_seconds() -> None:
    model = Model(name="m", model_class="batch", upstreams=[Upstream(name="u", url="http://h")])
    assert model.model_class == "batch"
    assert model.upstream_model == "m"
    assert Limits(idle_timeout=0.5).idle_timeout == 0.5


def test_a_learned_capacity_has_a_floor_and_a_ceiling(load: Load) -> None:
    cfg = load(
        "pools: [{name: p, capacity: auto, capacity_min: 8, capacity_max: 64,"
        " capacity_kv_limit: 0.85, capacity_rise_after: 5s}]\n" + one_model(pool="p")
    )
    pool = cfg.pools[0]
    assert (pool.capacity, pool.learned, pool.start) == ("auto", True, 8)
    assert (pool.capacity_max, pool.capacity_kv_limit, pool.capacity_rise_after) == (64, 0.85, 5.0)
    fixed = load("pools: [{name: p, capacity: 16}]\n" + one_model(pool="p")).pools[0]
    assert (fixed.learned, fixed.start, fixed.capacity_min) == (False, 16, None)


@pytest.mark.parametrize(
    ("pool", "found"),
    [
        (
            "{name: p, capacity: auto, capacity_max: 64}",
            ["1:9: pools[0].capacity_min: required with capacity: auto"],
        ),
        (
            "{name: p, capacity: auto, capacity_min: 8, capacity_max: 4}",
            ["1:66: pools[0].capacity_max: must be at least capacity_min (8), got 4"],
        ),
        (
            "{name: p, capacity: 16, capacity_min: 8}",
            ["1:47: pools[0].capacity_min: only with capacity: auto, not with a fixed capacity"],
        ),
        (
            "{name: p, capacity: 16, capacity_rise_after: 5s}",
            ["1:54: pools[0].capacity_rise_after: only with capacity: auto"],
        ),
        ("{name: p, capacity: Auto}", ["1:29: pools[0].capacity: expected an integer or 'auto'"]),
        ("{name: p, capacity: true}", ["1:29: pools[0].capacity: expected an integer or 'auto'"]),
        (
            "{name: p, capacity: auto, capacity_min: 0, capacity_max: 4}",
            ["1:49: pools[0].capacity_min: must be at least 1, got 0"],
        ),
        (
            "{name: p, capacity: auto, capacity_min: 1, capacity_max: 4, capacity_kv_limit: 1.5}",
            ["1:88: pools[0].capacity_kv_limit: must be at most 1, got 1.5"],
        ),
    ],
)
def test_learned_capacity_keys_are_checked_at_their_position(
    problems: Problems, pool: str, found: list[str]
) -> None:
    got = problems(f"pools: [{pool}]\n" + one_model(pool="p"))
    assert len(got) == len(found)
    for line, expected in zip(got, found, strict=True):
        assert line.startswith(expected), line
