"""A listener's TLS context, and its certificate swapped on reload without a restart.

The listening server is given one context for its whole life. A reload builds a
fresh context from the re-read references and, when it builds, makes it the
current one; the server's context hands each new handshake over to the current
context from its SNI callback (OpenSSL calls it for every ClientHello, with or
without a server name). So new connections get the new certificate, key and
client CA at once, and connections already open keep the session they have: no
stream is dropped. Building a new context rather than loading into the live one
matters: OpenSSL loads a certificate and its key in two steps, and a key that
does not match would leave the live context half changed.

A reference held in a vault is followed too: when the vault refresher reads a
new value for any of a listener's references, the listener reloads a moment
later (``VAULT_SETTLE`` seconds, so that a certificate and its key rotated
together are read as a pair), as on SIGHUP.

A reload that fails (a reference unreadable, a certificate that does not parse,
a key that does not match) changes nothing; the error names the reference and
the reason, never the content. Each listener reports the certificate it serves
(serial, SHA-256 fingerprint, expiry) in a log line and in
``fairgate_tls_certificate_expiry_timestamp_seconds``.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import ssl
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from fairgate.config import Config, ConfigError
from fairgate.config.tls import ListenerTls, TlsMaterial, references
from fairgate.config.tls_context import Certificate

__all__ = ["ServedTls", "TlsCollector", "listener_tls", "reload_on_hangup"]

log = logging.getLogger("fairgate.server.tls")

VAULT_SETTLE = 1.0
"""Seconds between a vault secret of a listener changing and its reload."""


class ServedTls:
    """The TLS of one listener (``name``: client or admin; ``where``: its config section).

    Raises ConfigError at construction when the material cannot serve (see TlsMaterial)."""

    def __init__(self, name: str, where: str, settings: ListenerTls) -> None:
        self.name = name
        self.where = where
        self._settings = settings
        first = TlsMaterial(where, settings)
        self.context = first.context  # given to the server; never changes
        self.context.sni_callback = self._hand_over
        self._current = first.context
        self.leaf: Certificate = first.leaf
        self.reloads = {"ok": 0, "failed": 0}
        self._pending: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[bool]] = set()
        for ref in references(settings).values():
            if ref.vault is not None:
                ref.cell.on_change(self._vault_changed)
        self._announce("serves")

    def _vault_changed(self, _value: str) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # read outside the serving loop: the next build reads it anyway
            return
        if self._pending is None:
            self._pending = loop.call_later(VAULT_SETTLE, self._reload_after_vault)

    def _reload_after_vault(self) -> None:
        self._pending = None
        task = asyncio.get_running_loop().create_task(self.reload())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _hand_over(
        self, ssl_object: ssl.SSLObject, _server_name: str | None, _context: ssl.SSLContext
    ) -> None:
        current = self._current
        if current is not self.context:
            ssl_object.context = current

    async def reload(self) -> bool:
        """Re-read the references; serve the new material if it builds, else keep the old."""
        try:
            material = await asyncio.to_thread(TlsMaterial, self.where, self._settings)
        except ConfigError as error:
            self.reloads["failed"] += 1
            log.error(
                "%s listener: TLS reload failed, still serving serial %x: %s",
                self.name,
                self.leaf.serial,
                "; ".join(d.message for d in error.diagnostics),
            )
            return False
        self._current = material.context
        self.leaf = material.leaf
        self.reloads["ok"] += 1
        self._announce("reloaded: serves")
        return True

    def _announce(self, what: str) -> None:
        if self.leaf.expired(datetime.now(UTC)):
            log.warning(
                "%s listener: the TLS certificate (serial %x) expired on %s UTC",
                self.name,
                self.leaf.serial,
                f"{self.leaf.not_after:%Y-%m-%d %H:%M:%S}",
            )
        log.info(
            "%s listener: TLS %s certificate serial %x, sha256 %s, expires %s UTC",
            self.name,
            what,
            self.leaf.serial,
            self.leaf.sha256,
            f"{self.leaf.not_after:%Y-%m-%d %H:%M:%S}",
        )


class TlsCollector(Collector):
    """The served certificates and the reload outcomes, read at scrape time."""

    def __init__(self, served: Iterable[ServedTls]) -> None:
        self._served = tuple(served)

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        expiry = GaugeMetricFamily(
            "fairgate_tls_certificate_expiry_timestamp_seconds",
            "When the certificate a listener serves expires (Unix time), by listener, "
            "serial (hex) and SHA-256 fingerprint",
            labels=["listener", "serial", "sha256"],
        )
        reloads = CounterMetricFamily(
            "fairgate_tls_reloads",
            "TLS reloads on SIGHUP by listener and outcome (ok, failed: the previous "
            "certificate is still served)",
            labels=["listener", "outcome"],
        )
        for tls in self._served:
            leaf = tls.leaf
            expiry.add_metric(
                [tls.name, f"{leaf.serial:x}", leaf.sha256], leaf.not_after.timestamp()
            )
            for outcome, count in tls.reloads.items():
                reloads.add_metric([tls.name, outcome], count)
        yield expiry
        yield reloads


def listener_tls(config: Config) -> dict[str, ServedTls]:
    """The TLS of each listener that has it, by listener name (ConfigError if it fails)."""
    sections = {
        "client": ("listen", config.listen.tls),
        "admin": ("admin_listen", config.admin_listen.tls),
    }
    return {
        name: ServedTls(name, where, settings)
        for name, (where, settings) in sections.items()
        if settings is not None
    }


def reload_on_hangup(tls: dict[str, ServedTls]) -> None:
    """SIGHUP re-reads every listener's certificate, key and client CA, one reload at a time.

    Installed for the whole life of the process, TLS or not: SIGHUP's default action
    would end it."""
    loop = asyncio.get_running_loop()
    running: set[asyncio.Task[None]] = set()

    async def reload() -> None:
        for served in tls.values():
            await served.reload()

    def on_hangup() -> None:
        if not tls:
            log.info("SIGHUP: no listener has TLS, nothing to reload")
            return
        if running:
            log.info("SIGHUP: a TLS reload is already running")
            return
        task = loop.create_task(reload())
        running.add(task)
        task.add_done_callback(running.discard)

    loop.add_signal_handler(signal.SIGHUP, on_hangup)
