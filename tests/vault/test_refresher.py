"""Start-up reads and refresh rounds: every reference named on failure, last value kept."""

from __future__ import annotations

import logging

import pytest

from fairgate.config import SecretRef
from fairgate.vault import SecretRefresher, SecretsUnreadable, VaultClient
from vault_server import VaultServer

from .conftest import Settings


class Seen:
    """A SecretObserver that remembers what it was told."""

    def __init__(self) -> None:
        self.failures: list[str] = []
        self.availability: list[bool] = []

    def refresh_failed(self, reference: str) -> None:
        self.failures.append(reference)

    def available(self, up: bool) -> None:
        self.availability.append(up)


def refs(*references: str) -> list[SecretRef]:
    return [SecretRef.model_validate(r) for r in references]


async def test_start_up_names_every_reference_it_cannot_read_and_no_value(
    vault: VaultServer, settings: Settings
) -> None:
    vault.put("secret", "ok", {"key": "sk-readable-value"})
    token = vault.token(paths=("secret/ok",))
    refresher = SecretRefresher(
        refs("vault:secret/ok#key", "vault:secret/denied#key", "vault:secret/ok#nope"),
        VaultClient(settings(token)),
        interval=60,
    )
    with pytest.raises(SecretsUnreadable) as caught:
        await refresher.read_all()
    await refresher.close()
    assert caught.value.problems == [
        ("vault:secret/denied#key", "permission denied (403): permission denied"),
        ("vault:secret/ok#nope", "the secret has no field 'nope'"),
    ]
    assert "sk-readable-value" not in str(caught.value)


async def test_one_read_fills_every_reference_to_the_same_secret(
    vault: VaultServer, settings: Settings
) -> None:
    vault.put("secret", "k", {"key": "v1"})
    first, second = refs("vault:secret/k#key", "vault:secret/k#key")
    refresher = SecretRefresher([first, second], VaultClient(settings("root-token")), interval=60)
    await refresher.read_all()
    await refresher.close()
    assert first.read() == second.read() == "v1"
    assert vault.count("/v1/secret/data/k") == 1


async def test_a_changed_secret_reaches_its_listeners_and_an_unchanged_one_does_not(
    vault: VaultServer, settings: Settings
) -> None:
    vault.put("secret", "k", {"key": "v1"})
    (ref,) = refs("vault:secret/k#key")
    seen: list[str] = []
    ref.cell.on_change(seen.append)
    refresher = SecretRefresher([ref], VaultClient(settings("root-token")), interval=60)
    try:
        await refresher.read_all()
        await refresher.refresh()
        assert seen == ["v1"]
        vault.put("secret", "k", {"key": "v2"})
        await refresher.refresh()
        assert seen == ["v1", "v2"] and ref.read() == "v2"
    finally:
        await refresher.close()


async def test_an_outage_keeps_the_last_value_reports_it_and_recovery_is_logged_once(
    vault: VaultServer, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    vault.put("secret", "k", {"key": "sk-last-good-value"})
    (ref,) = refs("vault:secret/k#key")
    seen = Seen()
    refresher = SecretRefresher(
        [ref], VaultClient(settings("root-token")), interval=60, observer=seen
    )
    try:
        await refresher.read_all()
        vault.stop()
        with caplog.at_level(logging.INFO, logger="fairgate.vault"):
            await refresher.refresh()
            await refresher.refresh()
        assert ref.read() == "sk-last-good-value"
        assert seen.failures == ["vault:secret/k#key", "vault:secret/k#key"]
        assert seen.availability == [False, False]
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 2
        assert "vault:secret/k#key" in errors[0].getMessage()
        assert "sk-last-good-value" not in caplog.text
        caplog.clear()
        vault.start()
        with caplog.at_level(logging.INFO, logger="fairgate.vault"):
            await refresher.refresh()
            await refresher.refresh()
        assert seen.availability[-2:] == [True, True]
        assert [r.getMessage() for r in caplog.records] == [
            "vault secret vault:secret/k#key is read again"
        ]
    finally:
        await refresher.close()
