"""The ``sso:`` section as the loader reads it: defaults, and what it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.conftest import Load, Problems, with_minimal

GOOD = """\
sso:
  issuer: "https://login.example.org/realms/research"
  client_id: fairgate-admin
  redirect_url: "https://llm.example.org/admin/callback"
"""


def test_defaults_and_a_public_client(load: Load) -> None:
    sso = load(with_minimal(GOOD)).sso
    assert sso is not None
    assert sso.issuer == "https://login.example.org/realms/research"
    assert sso.client_secret_file is None
    assert sso.scopes == ("openid", "profile", "email")
    assert sso.session_ttl == 8 * 3600.0
    assert sso.role == ()


def test_bindings_and_the_secret_are_read(load: Load, tmp_path: Path) -> None:
    (tmp_path / "sso.secret").write_text("s3cret\n")
    sso = load(
        with_minimal(
            GOOD
            + """\
  client_secret_file: sso.secret
  session_ttl: 168h
  role:
    - {value: llm-admins, role: proxy_admin}
    - {value: physics-leads, role: org_admin, org: physics}
    - {claim: email, value: "ada@example.org", role: viewer, team: lab}
"""
        )
    ).sso
    assert sso is not None and sso.client_secret_file is not None
    assert sso.client_secret_file.read() == "s3cret"
    assert sso.session_ttl == 168 * 3600.0
    assert [(r.claim, r.value, r.role, r.org, r.team) for r in sso.role] == [
        ("groups", "llm-admins", "proxy_admin", None, None),
        ("groups", "physics-leads", "org_admin", "physics", None),
        ("email", "ada@example.org", "viewer", None, "lab"),
    ]


def test_plain_http_is_for_a_loopback_provider_only(load: Load, problems: Problems) -> None:
    local = GOOD.replace("https://login.example.org", "http://127.0.0.1:8080").replace(
        "https://llm.example.org", "http://localhost:8081"
    )
    sso = load(with_minimal(local)).sso
    assert sso is not None and sso.issuer.startswith("http://127.0.0.1:8080")
    found = problems(with_minimal(GOOD.replace("https://login", "http://login")))
    assert any("sso.issuer must be https" in p for p in found), found
    found = problems(with_minimal(GOOD.replace("https://llm", "http://llm")))
    assert any("sso.redirect_url must be https" in p for p in found), found


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("  session_ttl: 169h\n", "session_ttl"),
        ("  scopes: [profile, email]\n", "must include openid"),
        ("  role: [{value: x, role: org_admin}]\n", "role org_admin needs org"),
        ("  role: [{value: x, role: team_admin, org: a}]\n", "role team_admin needs team"),
        ("  role: [{value: x, role: proxy_admin, team: t}]\n", "neither org nor team"),
        ("  role: [{value: x, role: viewer, org: a, team: t}]\n", "either org or team"),
        ("  role: [{value: x, role: member, team: t}]\n", "role"),
    ],
)
def test_bad_values_are_refused(problems: Problems, extra: str, message: str) -> None:
    found = problems(with_minimal(GOOD + extra))
    assert any(message in p for p in found), found


def test_the_redirect_must_be_the_callback_route(problems: Problems) -> None:
    found = problems(with_minimal(GOOD.replace("/admin/callback", "/elsewhere")))
    assert any("must end in /admin/callback" in p for p in found), found
