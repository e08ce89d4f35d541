"""A KV v2 server per test (tests/vault_server.py, in a thread, over a real socket)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from fairgate.config.vault import VaultSettings
from vault_server import VaultServer

Settings = Callable[..., VaultSettings]


@pytest.fixture
def vault() -> Iterator[VaultServer]:
    server = VaultServer().start()
    yield server
    server.stop()


@pytest.fixture
def settings(tmp_path: Path, vault: VaultServer) -> Settings:
    """VaultSettings for ``vault``; ``token=`` writes a token file, else AppRole files."""

    def build(token: str | None = None, **extra: Any) -> VaultSettings:
        values: dict[str, Any] = {"address": vault.url, "timeout": 5.0}
        if token is not None:
            (tmp_path / "vault.token").write_text(token + "\n")
            values["token_file"] = tmp_path / "vault.token"
        values.update(extra)
        return VaultSettings.model_validate(values)

    return build


def write_credential(directory: Path, name: str, value: str) -> Path:
    path = directory / name
    path.write_text(value + "\n")
    return path


def tls_pair(directory: Path) -> tuple[ssl.SSLContext, Path]:
    """A server TLS context for 127.0.0.1 signed by a fresh CA, and the CA's PEM file."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test vault CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_file = directory / "ca.pem"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file, key_file = directory / "vault.pem", directory / "vault.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    return context, ca_file
