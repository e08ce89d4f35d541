"""trusted_proxies, routes and metrics_token_file as the loader reads them."""

from __future__ import annotations

from pathlib import Path

from config.conftest import Load, Problems, with_minimal


def test_by_default_nobody_is_trusted_and_metrics_and_health_answer_loopback_only(
    load: Load,
) -> None:
    config = load(with_minimal(""))
    assert config.trusted_proxies == ()
    assert config.routes.inference.allow is None and config.routes.admin.allow is None
    assert config.routes.metrics.allow == ("127.0.0.0/8", "::1/128")
    assert config.routes.health.allow == ("127.0.0.0/8", "::1/128")
    assert config.metrics_token_file is None


def test_networks_are_read_normalised(load: Load, tmp_path: Path) -> None:
    (tmp_path / "metrics.token").write_text("t0ken\n")
    config = load(
        with_minimal("""
        trusted_proxies: [10.0.0.5, "2001:DB8::/32"]
        routes:
          metrics: {allow: [10.1.0.0/16]}
          health: {allow: null}
          admin: {allow: []}
        metrics_token_file: metrics.token
        """)
    )
    assert config.trusted_proxies == ("10.0.0.5/32", "2001:db8::/32")
    assert config.routes.metrics.allow == ("10.1.0.0/16",)
    assert config.routes.health.allow is None
    assert config.routes.admin.allow == ()
    assert config.metrics_token_file is not None
    assert config.metrics_token_file.read() == "t0ken"


def test_a_bad_network_is_named_with_its_position(problems: Problems) -> None:
    found = problems(
        with_minimal("""
        trusted_proxies: [10.0.0.0/8, 10.0.0.5/8]
        routes:
          metrics: {allow: [fe80::%eth0/64]}
          health: {allow: [local]}
        """)
    )
    assert found[0].startswith("1:31: trusted_proxies[1]: ")
    assert "host bits set: write 10.0.0.0/8 for the network or 10.0.0.5/32" in found[0]
    assert found[1].startswith("3:21: routes.metrics.allow[0]: ") and "no zone" in found[1]
    assert found[2].startswith("4:20: routes.health.allow[0]: ") and "'local'" in found[2]
    assert len(found) == 3


def test_an_unknown_route_class_is_refused(problems: Problems) -> None:
    found = problems(with_minimal("routes: {pages: {allow: []}}\n"))
    assert len(found) == 1 and "unknown key 'pages' in 'routes'" in found[0]


def test_an_inline_metrics_token_points_to_its_file_key(problems: Problems) -> None:
    found = problems(with_minimal("metrics_token: s3cret-value\n"))
    assert found == [
        "1:1: inline secret 'metrics_token' is not allowed: write it to a file and reference "
        "the file with a '*_file' key such as 'metrics_token_file'"
    ]
    assert "s3cret-value" not in found[0]
