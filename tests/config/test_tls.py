"""``listen.tls`` and ``admin_listen.tls`` at load: certificates that do not serve are errors
at their reference, an expired certificate a warning."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from tests.tls_certs import Authority, encrypted_key_pem

from fairgate.config.secrets import SecretRef
from fairgate.config.tls import ListenerTls, tls_report

from .conftest import Load, Problems, with_minimal


@pytest.fixture(scope="module")
def ca() -> Authority:
    return Authority("config test CA")


def listen_tls(cert: str = "server.crt", key: str = "server.key") -> str:
    return with_minimal(
        f"""
        listen:
          tls: {{cert_file: {cert}, key_file: {key}}}
        """
    )


def test_a_certificate_and_its_key_load(ca: Authority, load: Load, tmp_path: Path) -> None:
    ca.issue("gw", server=True).write(tmp_path, "server")
    ca.write(tmp_path / "ops.pem")
    config = load(
        with_minimal(
            """
            listen:
              tls: {cert_file: server.crt, key_file: server.key}
            admin_listen:
              tls: {cert_file: server.crt, key_file: server.key, client_ca_file: ops.pem}
            """
        )
    )
    assert (
        config.listen.tls is not None
        and config.listen.tls.cert_file.path == tmp_path / "server.crt"
    )
    assert (
        config.admin_listen.tls is not None and config.admin_listen.tls.client_ca_file is not None
    )


def test_a_key_that_does_not_match_names_the_key_file(
    ca: Authority, problems: Problems, tmp_path: Path
) -> None:
    ca.issue("gw", server=True).write(tmp_path, "server")
    ca.issue("other", server=True).write(tmp_path, "other")
    assert problems(listen_tls(key="other.key")) == [
        "2:42: listen.tls.key_file: the private key does not match the certificate: "
        f"{tmp_path / 'other.key'}"
    ]


def test_a_certificate_that_does_not_parse_names_the_certificate_file(
    ca: Authority, problems: Problems, tmp_path: Path
) -> None:
    issued = ca.issue("gw", server=True)
    issued.write(tmp_path, "server")
    (tmp_path / "broken.crt").write_text("this is not a certificate\n")
    der = issued.cert.public_bytes(serialization.Encoding.DER)
    cut = base64.b64encode(der[: len(der) // 2]).decode()  # valid base64, half a certificate
    (tmp_path / "cut.crt").write_text(
        f"-----BEGIN CERTIFICATE-----\n{cut}\n-----END CERTIFICATE-----\n"
    )
    assert problems(listen_tls(cert="broken.crt")) == [
        "2:20: listen.tls.cert_file: no PEM certificate (-----BEGIN CERTIFICATE-----) found: "
        f"{tmp_path / 'broken.crt'}"
    ]
    assert problems(listen_tls(cert="cut.crt")) == [
        "2:20: listen.tls.cert_file: a PEM certificate block is not an X.509 certificate: "
        f"{tmp_path / 'cut.crt'}"
    ]


def test_an_encrypted_key_is_refused_without_asking_for_a_passphrase(
    ca: Authority, problems: Problems, tmp_path: Path
) -> None:
    issued = ca.issue("gw", server=True)
    issued.write(tmp_path, "server")
    (tmp_path / "locked.key").write_text(encrypted_key_pem(issued, b"passphrase"))
    (found,) = problems(listen_tls(key="locked.key"))
    assert "listen.tls.key_file: the private key is encrypted" in found
    assert str(tmp_path / "locked.key") in found


def test_a_client_ca_that_is_not_a_certificate_is_refused(
    ca: Authority, problems: Problems, tmp_path: Path
) -> None:
    issued = ca.issue("gw", server=True)
    issued.write(tmp_path, "server")
    (tmp_path / "ops.pem").write_text(issued.key_pem)  # a key given where the CA goes
    (found,) = problems(
        with_minimal(
            """
            admin_listen:
              tls: {cert_file: server.crt, key_file: server.key, client_ca_file: ops.pem}
            """
        )
    )
    assert found.startswith("2:70: admin_listen.tls.client_ca_file: no PEM certificate")
    assert issued.key_pem.splitlines()[1] not in found  # never the content


def test_a_missing_file_is_reported_once(problems: Problems, tmp_path: Path) -> None:
    assert problems(listen_tls()) == [
        f"2:20: listen.tls.cert_file: secret file does not exist: {tmp_path / 'server.crt'}",
        f"2:42: listen.tls.key_file: secret file does not exist: {tmp_path / 'server.key'}",
    ]


def test_client_ca_is_only_for_the_admin_listener(
    ca: Authority, problems: Problems, tmp_path: Path
) -> None:
    ca.issue("gw", server=True).write(tmp_path, "server")
    ca.write(tmp_path / "ops.pem")
    (found,) = problems(
        with_minimal(
            """
            listen:
              tls: {cert_file: server.crt, key_file: server.key, client_ca_file: ops.pem}
            """
        )
    )
    assert "client_ca_file" in found


def test_an_expired_certificate_loads_with_a_warning(
    ca: Authority, load: Load, tmp_path: Path
) -> None:
    long_ago = datetime.now(UTC) - timedelta(days=10)
    expired = ca.issue("gw", server=True, not_before=long_ago, days=2)
    expired.write(tmp_path, "server")
    config = load(listen_tls())
    now = datetime.now(UTC)
    errors, (warning,) = tls_report({"listen": config.listen.tls, "admin_listen": None}, now)
    assert errors == []
    assert warning.startswith(
        f"listen.tls.cert_file: {tmp_path / 'server.crt'}: the certificate expired on"
    )
    assert f"serial {expired.serial:x}" in warning
    assert tls_report({"listen": config.listen.tls}, now - timedelta(days=9)) == ([], [])


def test_material_held_in_the_vault_is_checked_once_read(ca: Authority) -> None:
    """The loader cannot read a vault secret; check-config checks the pair again after
    the vault was read, and names the vault reference, never the value."""
    cert = SecretRef.model_validate("vault:secret/gateway/tls#cert")
    key = SecretRef.model_validate("vault:secret/gateway/tls#key")
    cert.cell.set(ca.issue("gw", server=True).cert_pem)
    stranger = ca.issue("someone else", server=True)
    key.cell.set(stranger.key_pem)
    settings = ListenerTls(cert_file=cert, key_file=key)
    (error,), warnings = tls_report({"listen": settings}, datetime.now(UTC))
    assert warnings == []
    assert error.message == (
        "listen.tls.key_file: the private key does not match the certificate: "
        "vault:secret/gateway/tls#key"
    )
    assert stranger.key_pem.splitlines()[1] not in str(error)
