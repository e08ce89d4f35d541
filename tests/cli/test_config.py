"""``fairgate check-config`` as an operator runs it: a real process, its output and exit status."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.tls_certs import Authority

from vault_server import VaultServer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SECRET = "sk-live-never-print-me-4242"


def check_config(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FAIRGATE_")}
    return subprocess.run(
        [sys.executable, "-m", "fairgate", "check-config", *args],
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def test_a_valid_file_prints_a_summary_and_exits_0() -> None:
    result = check_config("-c", str(EXAMPLES / "gateway.yaml"))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok: 2 models, 3 upstreams, 1 pools, 2 orgs\n"
    assert result.stderr == ""


def test_every_problem_is_one_line_on_stderr_and_the_exit_status_is_1(tmp_path: Path) -> None:
    path = write(
        tmp_path / "gateway.yaml",
        """
        proxy: {retires: 3}
        listen: {port: abc}
        models:
          - name: m
            fallbacks: [m]
            upstreams: [{name: u, url: "http://user:pw@10.0.0.1:8000"}]
        proxy: {}
        """,
    )
    result = check_config("-c", str(path))
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"{path}:1:9: unknown key 'retires' in 'proxy' (did you mean 'retries'?)",
        f"{path}:2:16: listen.port: expected an integer, got 'abc'",
        f"{path}:5:17: model 'm' falls back to itself",
        f"{path}:6:32: models[0].upstreams[0].url: upstream URL must not contain credentials: "
        "use key_file for the key",
        f"{path}:7:1: duplicate key 'proxy' (first defined at 1:1)",
    ]


def test_the_config_file_defaults_to_fairgate_config_and_overrides_apply(tmp_path: Path) -> None:
    minimal = str(EXAMPLES / "minimal.yaml")
    result = check_config(env={"FAIRGATE_CONFIG": minimal})
    assert (result.returncode, result.stdout) == (0, "ok: 1 models, 1 upstreams, 0 pools, 0 orgs\n")
    result = check_config(env={"FAIRGATE_CONFIG": minimal, "FAIRGATE_LISTEN__PORT": "http"})
    assert result.returncode == 1
    assert result.stderr == (
        "env:FAIRGATE_LISTEN__PORT: listen.port: expected an integer, got 'http'\n"
    )


def test_a_missing_file_or_no_file_is_a_one_line_reason(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    result = check_config("-c", str(missing))
    assert result.returncode == 1
    assert result.stderr == f"{missing}: configuration file not found\n"
    result = check_config()
    assert result.returncode == 1
    assert len(result.stderr.splitlines()) == 1
    assert "FAIRGATE_CONFIG" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_yaml_syntax_error_is_reported_without_a_traceback(tmp_path: Path) -> None:
    path = write(tmp_path / "broken.yaml", "listen: {port: 8080\nmodels: []\n")
    result = check_config("-c", str(path))
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert re.match(rf"{re.escape(str(path))}:2:7: invalid YAML: ", line)


def test_secrets_are_never_printed(tmp_path: Path) -> None:
    (tmp_path / "vllm.key").write_text(SECRET + "\n")
    (tmp_path / "empty.key").write_text("")
    path = write(
        tmp_path / "gateway.yaml",
        f"""
        master_key_file: empty.key
        store: {{url: "postgresql://app:{SECRET}@db/fairgate"}}
        models:
          - name: m
            api_key: {SECRET}
            upstreams:
              - {{name: u, url: "http://10.0.0.1:8000", key_file: vllm.key, weight: heavy}}
        """,
    )
    result = check_config("-c", str(path))
    assert result.returncode == 1
    assert len(result.stderr.splitlines()) == 4  # empty key file, store URL, inline key, weight
    assert f"{tmp_path / 'empty.key'}" in result.stderr
    assert SECRET not in result.stderr + result.stdout


def test_a_key_that_does_not_match_its_certificate_names_the_key_file(tmp_path: Path) -> None:
    ca = Authority("check-config CA")
    ca.issue("gateway", server=True).write(tmp_path, "server")
    _, stranger = ca.issue("someone else", server=True).write(tmp_path, "stranger")
    path = write(
        tmp_path / "gateway.yaml",
        """
        listen:
          tls: {cert_file: server.crt, key_file: stranger.key}
        models:
          - name: m
            upstreams: [{name: u, url: "http://10.0.0.1:8000"}]
        """,
    )
    result = check_config("-c", str(path))
    assert result.returncode == 1
    assert result.stderr == (
        f"{path}:2:42: listen.tls.key_file: the private key does not match the certificate: "
        f"{stranger}\n"
    )
    assert stranger.read_text().splitlines()[1] not in result.stderr


def test_an_expired_certificate_is_a_warning_not_a_failure(tmp_path: Path) -> None:
    ca = Authority("check-config CA")
    expired = ca.issue(
        "gateway", server=True, not_before=datetime.now(UTC) - timedelta(days=9), days=1
    )
    cert, _ = expired.write(tmp_path, "server")
    path = write(
        tmp_path / "gateway.yaml",
        """
        admin_listen:
          tls: {cert_file: server.crt, key_file: server.key}
        models:
          - name: m
            upstreams: [{name: u, url: "http://10.0.0.1:8000"}]
        """,
    )
    result = check_config("-c", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok: ")
    assert result.stderr.startswith(
        f"warning: admin_listen.tls.cert_file: {cert}: the certificate expired on "
    )


def vault_config(directory: Path, address: str, token: str) -> Path:
    (directory / "vault.token").write_text(token + "\n")
    return write(
        directory / "gateway.yaml",
        f"""
        vault: {{address: "{address}", token_file: vault.token, timeout: 2s}}
        models:
          - name: m
            upstreams:
              - {{name: u, url: "http://127.0.0.1:8000", key_file: "vault:secret/engines#key"}}
        """,
    )


def test_check_config_reads_the_vault_and_names_a_refused_reference(tmp_path: Path) -> None:
    with VaultServer() as vault:
        vault.put("secret", "engines", {"key": SECRET})
        allowed = check_config("-c", str(vault_config(tmp_path, vault.url, "root-token")))
        assert allowed.returncode == 0, allowed.stderr
        assert allowed.stdout == (
            "ok: 1 models, 1 upstreams, 0 pools, 0 orgs, 1 vault secrets read\n"
        )
        denied_token = vault.token(paths=("secret/other",))
        denied = check_config("-c", str(vault_config(tmp_path, vault.url, denied_token)))
        skipped = check_config(
            "--skip-vault", "-c", str(vault_config(tmp_path, vault.url, denied_token))
        )
        reads = vault.count("/v1/secret/data/engines")
    assert denied.returncode == 1
    assert denied.stderr == (
        f"{tmp_path / 'gateway.yaml'}: vault:secret/engines#key: cannot be read: "
        "permission denied (403): permission denied\n"
    )
    assert SECRET not in denied.stderr + allowed.stdout + allowed.stderr
    assert denied_token not in denied.stderr
    assert skipped.returncode == 0, skipped.stderr
    assert skipped.stdout.endswith(", 1 vault secrets not read\n")
    assert reads == 2  # the allowed and the denied run; --skip-vault read nothing


def test_check_config_names_the_reference_when_the_vault_redirects(tmp_path: Path) -> None:
    with VaultServer() as vault, VaultServer() as elsewhere:
        vault.redirect_to = elsewhere.url
        result = check_config("-c", str(vault_config(tmp_path, vault.url, "root-token")))
        assert elsewhere.requests == []
    assert result.returncode == 1
    assert result.stderr.endswith(
        "vault:secret/engines#key: cannot be read: the vault answered a redirect (302), "
        "not followed\n"
    )


def test_listener_tls_held_in_the_vault_is_checked_once_read(tmp_path: Path) -> None:
    ca = Authority("check-config CA")
    issued, stranger = ca.issue("gateway", server=True), ca.issue("other", server=True)
    (tmp_path / "vault.token").write_text("root-token\n")
    path = write(
        tmp_path / "gateway.yaml",
        """
        vault: {address: "ADDRESS", token_file: vault.token, timeout: 2s}
        listen:
          tls: {cert_file: "vault:secret/tls#cert", key_file: "vault:secret/tls#key"}
        models:
          - name: m
            upstreams: [{name: u, url: "http://10.0.0.1:8000"}]
        """,
    )
    with VaultServer() as vault:
        path.write_text(path.read_text().replace("ADDRESS", vault.url))
        vault.put("secret", "tls", {"cert": issued.cert_pem, "key": issued.key_pem})
        good = check_config("-c", str(path))
        vault.put("secret", "tls", {"cert": issued.cert_pem, "key": stranger.key_pem})
        mismatched = check_config("-c", str(path))
        skipped = check_config("--skip-vault", "-c", str(path))
    assert good.returncode == 0, good.stderr
    assert good.stdout.endswith(", 2 vault secrets read\n")
    assert mismatched.returncode == 1
    assert "listen.tls.key_file" in mismatched.stderr
    assert "vault:secret/tls#key" in mismatched.stderr
    assert "PRIVATE KEY" not in mismatched.stderr
    assert skipped.returncode == 0, skipped.stderr
    assert skipped.stdout.endswith(", 2 vault secrets not read\n")
