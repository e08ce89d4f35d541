"""``listen.tls`` and ``admin_listen.tls``: the certificate, key and client CA of a listener.

All three are secret references. The loader checks them together once each is
readable (:func:`tls_diagnostics`): a certificate that does not parse, a key that
is missing, encrypted or does not match the certificate, or a client CA that
does not load is an error naming the reference; an expired certificate is only a
warning (:func:`tls_report`), since refusing to start would not make the
certificate any newer.
"""

from __future__ import annotations

from datetime import datetime

from fairgate.config.diagnostics import ConfigError, Diagnostic
from fairgate.config.document import Document
from fairgate.config.fields import Section
from fairgate.config.secrets import SecretRef
from fairgate.config.tls_context import Certificate, TlsProblem, certificates, server_context

__all__ = [
    "AdminTls",
    "ListenerTls",
    "TlsMaterial",
    "TlsRefused",
    "references",
    "tls_diagnostics",
    "tls_report",
]


class ListenerTls(Section):
    """TLS on a listener: ``cert_file`` holds the PEM chain (leaf first), ``key_file`` its
    unencrypted PEM private key. Both are re-read on SIGHUP."""

    cert_file: SecretRef
    key_file: SecretRef


class AdminTls(ListenerTls):
    """TLS on the admin listener; with ``client_ca_file`` (PEM CA certificates) every
    client must present a certificate issued by one of them (mutual TLS) — in addition
    to its admin credentials, never instead of them."""

    client_ca_file: SecretRef | None = None


class TlsRefused(ConfigError):
    """TLS material that cannot serve: ``key`` is the setting at fault (``cert_file``, …)."""

    def __init__(self, where: str, key: str, ref: SecretRef, reason: str) -> None:
        self.key = key
        message = f"{where}.tls.{key}: {reason}: {ref}"
        super().__init__([Diagnostic(str(ref), 0, 0, message)])


class TlsMaterial:
    """A listener's TLS settings read once: the PEM texts, the leaf certificate, a context.

    Raises ConfigError (an unreadable reference) or TlsRefused, naming the reference at
    fault, never the content."""

    def __init__(self, where: str, settings: ListenerTls) -> None:
        self.where = where
        refs = references(settings)
        texts = {key: ref.read() for key, ref in refs.items()}
        try:
            self.context = server_context(
                texts["cert_file"], texts["key_file"], texts.get("client_ca_file")
            )
            self.leaf: Certificate = certificates(texts["cert_file"])[0]
        except TlsProblem as problem:
            key = f"{problem.part}_file"
            raise TlsRefused(where, key, refs[key], problem.reason) from None


def tls_diagnostics(doc: Document, sections: dict[str, ListenerTls | None]) -> list[Diagnostic]:
    """One diagnostic per listener whose TLS material cannot serve, at its ``tls`` key.

    A reference that cannot be read at all is left to the secret check, which
    reports it already."""
    found = []
    for where, settings in sections.items():
        if settings is None or any(ref.problem() for ref in references(settings).values()):
            continue
        try:
            TlsMaterial(where, settings)
        except TlsRefused as refused:
            mark = doc.value_mark((where, "tls", refused.key))
            found.append(Diagnostic.at(mark, refused.diagnostics[0].message))
    return found


def tls_report(
    sections: dict[str, ListenerTls | None], now: datetime
) -> tuple[list[Diagnostic], list[str]]:
    """Errors and warnings for the listeners' TLS once every secret is read.

    The loader checks file references; a vault reference is read only after the
    load, so ``check-config`` calls this then: the errors are those material that
    cannot serve (vault secrets included), the warnings certificates that expired."""
    errors: list[Diagnostic] = []
    warnings: list[str] = []
    for where, settings in sections.items():
        if settings is None:
            continue
        try:
            leaf = TlsMaterial(where, settings).leaf
        except ConfigError as error:
            errors += error.diagnostics
            continue
        if leaf.expired(now):
            warnings.append(
                f"{where}.tls.cert_file: {settings.cert_file}: the certificate expired "
                f"on {leaf.not_after:%Y-%m-%d %H:%M:%S} UTC (serial {leaf.serial:x})"
            )
    return errors, warnings


def references(settings: ListenerTls) -> dict[str, SecretRef]:
    """The listener's secret references by key: cert_file, key_file, client_ca_file if set."""
    refs = {"cert_file": settings.cert_file, "key_file": settings.key_file}
    ca = getattr(settings, "client_ca_file", None)
    if ca is not None:
        refs["client_ca_file"] = ca
    return refs
