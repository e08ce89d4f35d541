"""A KV v2 server per test (tests/vault_server.py, in a thread, over a real socket)."""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.tls_certs import Authority

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
    ca = Authority("test vault CA")
    cert_file, key_file = ca.issue("vault", server=True).write(directory, "vault")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    return context, ca.write(directory / "ca.pem")
