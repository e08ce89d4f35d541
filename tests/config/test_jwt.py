"""The ``jwt:`` section as the loader reads it: defaults, and what it refuses."""

from __future__ import annotations

import pytest

from config.conftest import Load, Problems, with_minimal

GOOD = """\
jwt:
  issuer: "https://sso.example.org/realms/research"
  audience: fairgate
  map:
    - {value: lab-physics, team: physics}
"""


def test_defaults(load: Load) -> None:
    jwt = load(with_minimal(GOOD)).jwt
    assert jwt is not None
    assert (jwt.type, jwt.jwks_url, jwt.clock_skew, jwt.min_refresh) == (None, None, 60.0, 60.0)
    assert (jwt.rpm, jwt.tpm, jwt.max_inflight, jwt.optional_at_start) == (None, None, None, False)
    assert [(m.claim, m.value, m.team, m.project) for m in jwt.map] == [
        ("groups", "lab-physics", "physics", None)
    ]
    assert jwt.exchange == ()


def test_an_exchange_issuer_keeps_100_keys_a_person_unless_told(load: Load) -> None:
    exchange = """\
  exchange:
    - issuer: "https://ci.example.org"
      audience: fairgate-ci
      map: [{claim: project_path, value: lab/infer, team: physics}]
"""
    jwt = load(with_minimal(GOOD + exchange)).jwt
    assert jwt is not None and jwt.exchange[0].max_keys == 100
    jwt = load(with_minimal(GOOD + exchange + "      max_keys: 1\n")).jwt
    assert jwt is not None and jwt.exchange[0].max_keys == 1


def test_an_exchange_issuer_is_read(load: Load) -> None:
    jwt = load(
        with_minimal(
            GOOD
            + """\
  type: at+jwt
  rpm: 60
  exchange:
    - issuer: "https://ci.example.org"
      audience: fairgate-ci
      key_ttl: 10m
      map: [{claim: project_path, value: lab/infer, team: physics, project: ci}]
"""
        )
    ).jwt
    assert jwt is not None and jwt.type == "at+jwt" and jwt.rpm == 60
    (exchange,) = jwt.exchange
    assert (exchange.issuer, exchange.key_ttl, exchange.map[0].project) == (
        "https://ci.example.org",
        600.0,
        "ci",
    )


ISSUER = '  issuer: "https://sso.example.org/realms/research"\n'


@pytest.mark.parametrize(
    ("old", "new", "says"),
    [
        (ISSUER, '  issuer: "http://sso.example.org"\n', "https"),
        (ISSUER, '  issuer: "https://sso.example.org?x=1"\n', "query"),
        ("", "  audiance: typo\n", "audiance"),
        ("", "  type: JWT\n", "type"),
        ("", "  clock_skew: 1h\n", "clock_skew"),
        ("", '  jwks_url: "http://keys.example.org/jwks"\n', "https"),
        ("", "  rpm: 0\n", "rpm"),
        (
            "",
            "  exchange:\n    - {issuer: 'https://ci.example.org', audience: a, map: []}\n",
            "map",
        ),
        (
            "",
            "  exchange:\n    - {issuer: 'https://ci.example.org', audience: a, key_ttl: 48h,"
            " map: [{value: v, team: t}]}\n",
            "key_ttl",
        ),
        *(
            (
                "",
                "  exchange:\n    - {issuer: 'https://ci.example.org', audience: a,"
                f" max_keys: {bad}, map: [{{value: v, team: t}}]}}\n",
                "max_keys",
            )
            for bad in ("0", "-1", "100001", "'10'", "2.5", "true")
        ),
        (
            "",
            "  exchange:\n    - {issuer: 'https://sso.example.org/realms/research', audience: a,"
            " map: [{value: v, team: t}]}\n",
            "differ",
        ),
    ],
)
def test_refused(problems: Problems, old: str, new: str, says: str) -> None:
    text = GOOD.replace(old, new) if old else GOOD + new
    found = problems(with_minimal(text))
    assert any(says in p for p in found), found


def test_audience_is_required(problems: Problems) -> None:
    text = GOOD.replace("  audience: fairgate\n", "")
    assert any("audience" in p for p in problems(with_minimal(text)))


def test_a_loopback_provider_may_be_plain_http(load: Load) -> None:
    jwt = load(with_minimal(GOOD.replace("https://sso.example.org", "http://127.0.0.1:8080"))).jwt
    assert jwt is not None and jwt.issuer.startswith("http://127.0.0.1")
