"""Server-side TLS contexts built from PEM text, and what a certificate says about itself.

The PEM text comes from secret references (a file today, a vault entry too), so
the context is built from memory: Python's ``ssl`` module loads a certificate
chain and a private key only from paths, so each is written to an anonymous
in-memory file (``memfd_create``: no name in any directory, gone when closed)
that OpenSSL opens as ``/proc/self/fd/N``. Where that does not exist, a file
with mode 0600 in a fresh directory with mode 0700 is used and removed as soon
as OpenSSL has read it. The client CA goes in as ``cadata``, no file at all.

Every context refuses TLS before 1.2, compression and renegotiation, offers
only forward-secret AEAD suites for TLS 1.2, and speaks HTTP/1.1 by ALPN. A
context that verifies client certificates speaks TLS 1.3 only and resumes no
session (see ``_no_resumption``).

It sits in ``fairgate.config``, next to the settings it serves, rather than in
the pure ``fairgate.core``: it writes the PEM text out and has OpenSSL read it.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import re
import shutil
import ssl
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from hashlib import sha256
from typing import Literal

__all__ = ["Certificate", "TlsProblem", "certificates", "server_context"]

Part = Literal["cert", "key", "client_ca"]

_PEM_BLOCK = re.compile(
    r"-----BEGIN CERTIFICATE-----\s*(?P<body>[A-Za-z0-9+/=\s]*?)-----END CERTIFICATE-----"
)
_PRIVATE_KEY = re.compile(r"-----BEGIN (?:[A-Z]+ )?PRIVATE KEY-----")
_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL:@SECLEVEL=2"
# OpenSSL reasons that concern the certificate rather than the key.
_CERTIFICATE_REASONS = {"EE_KEY_TOO_SMALL", "CA_MD_TOO_WEAK", "CA_KEY_TOO_SMALL"}


class TlsProblem(Exception):
    """Why TLS material cannot be used; ``part`` says which input (never its content)."""

    def __init__(self, part: Part, reason: str) -> None:
        super().__init__(reason)
        self.part: Part = part
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Certificate:
    """What an operator needs to tell one certificate from another."""

    serial: int
    not_after: datetime
    sha256: str  # hex SHA-256 of the DER encoding, as ``openssl x509 -fingerprint -sha256``

    def expired(self, now: datetime) -> bool:
        return now >= self.not_after


def certificates(pem: str, part: Part = "cert") -> list[Certificate]:
    """Every certificate in ``pem``, in order; TlsProblem when there is none or one is broken."""
    found = []
    for block in _PEM_BLOCK.finditer(pem):
        try:
            der = base64.b64decode("".join(block["body"].split()), validate=True)
        except (binascii.Error, ValueError):
            raise TlsProblem(part, "a PEM certificate block is not valid base64") from None
        found.append(_describe(der, part))
    if not found:
        raise TlsProblem(part, "no PEM certificate (-----BEGIN CERTIFICATE-----) found")
    return found


def server_context(cert_pem: str, key_pem: str, client_ca_pem: str | None = None) -> ssl.SSLContext:
    """A server context serving this chain and key; with ``client_ca_pem``, clients must
    present a certificate issued by one of those CAs (mutual TLS).

    Raises TlsProblem naming the part at fault: a certificate that does not parse, a
    key that is missing, encrypted or does not match the certificate, a CA that does
    not load."""
    certificates(cert_pem, "cert")
    if not _PRIVATE_KEY.search(key_pem):
        raise TlsProblem("key", "no PEM private key (-----BEGIN … PRIVATE KEY-----) found")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    context.set_ciphers(_CIPHERS)
    context.set_alpn_protocols(["http/1.1"])
    _load_chain(context, cert_pem, key_pem)
    if client_ca_pem is not None:
        certificates(client_ca_pem, "client_ca")
        try:
            context.load_verify_locations(cadata=client_ca_pem)
        except (ssl.SSLError, ValueError) as exc:
            raise TlsProblem("client_ca", f"the CA certificates do not load: {_why(exc)}") from None
        context.verify_mode = ssl.CERT_REQUIRED
        _no_resumption(context)
    return context


def _no_resumption(context: ssl.SSLContext) -> None:
    """Every connection proves its client certificate against the CA current then.

    A resumed session skips the certificate: a client certified by a CA an
    operator has since removed could resume for as long as its session lives.
    TLS 1.3 without tickets resumes nothing; TLS 1.2 would still resume from the
    server's session cache, which Python offers no way to turn off — so a context
    that verifies clients speaks TLS 1.3 only."""
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.options |= ssl.OP_NO_TICKET
    context.num_tickets = 0


class _EncryptedKey(Exception):
    pass


def _no_password() -> bytes:
    # Without a callback OpenSSL would prompt on the terminal for an encrypted key.
    raise _EncryptedKey


def _load_chain(context: ssl.SSLContext, cert_pem: str, key_pem: str) -> None:
    with _private_file(cert_pem) as cert_path, _private_file(key_pem) as key_path:
        try:
            context.load_cert_chain(cert_path, key_path, password=_no_password)
        except _EncryptedKey:
            raise TlsProblem(
                "key",
                "the private key is encrypted; give it unencrypted (passphrases are not read)",
            ) from None
        except ssl.SSLError as exc:
            reason = exc.reason or ""
            if reason == "KEY_VALUES_MISMATCH":
                raise TlsProblem("key", "the private key does not match the certificate") from None
            if reason in _CERTIFICATE_REASONS:
                raise TlsProblem("cert", f"OpenSSL refuses it: {_why(exc)}") from None
            if not reason:  # OpenSSL's "PEM lib": the key's PEM or DER does not decode
                raise TlsProblem("key", "not a usable PEM private key") from None
            raise TlsProblem("key", f"OpenSSL refuses it: {_why(exc)}") from None


def _why(exc: Exception) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return f"{exc.library or 'SSL'} {exc.reason}"
    return type(exc).__name__


@contextlib.contextmanager
def _private_file(text: str) -> Iterator[str]:
    data = text.encode("utf-8")
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fd = os.memfd_create("fairgate-tls", os.MFD_CLOEXEC)
        try:
            os.write(fd, data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    directory = tempfile.mkdtemp(prefix="fairgate-tls-")  # mode 0700
    path = os.path.join(directory, "pem")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        yield path
    finally:
        shutil.rmtree(directory, ignore_errors=True)


# A few lines of DER: enough of X.509 for the serial and the end of validity, without a
# dependency on a cryptography library at run time.


def _describe(der: bytes, part: Part) -> Certificate:
    try:
        _, body, _ = _element(der, 0, 0x30)  # Certificate
        _, tbs, _ = _element(der, body, 0x30)  # TBSCertificate
        tag, start, end = _element(der, tbs)
        if tag == 0xA0:  # [0] version
            tag, start, end = _element(der, end)
        if tag != 0x02:
            raise ValueError("no serial number")
        serial = int.from_bytes(der[start:end], "big", signed=True)
        _, _, after = _element(der, end, 0x30)  # signature algorithm
        _, _, after = _element(der, after, 0x30)  # issuer
        _, validity, _ = _element(der, after, 0x30)
        _, _, after = _element(der, validity)  # notBefore
        tag, start, end = _element(der, after)  # notAfter
        not_after = _time(tag, der[start:end])
    except (ValueError, IndexError):
        raise TlsProblem(part, "a PEM certificate block is not an X.509 certificate") from None
    return Certificate(serial, not_after, sha256(der).hexdigest())


def _element(der: bytes, pos: int, expect: int | None = None) -> tuple[int, int, int]:
    """The tag, content start and content end of the DER element at ``pos``."""
    tag, length = der[pos], der[pos + 1]
    pos += 2
    if length & 0x80:
        count = length & 0x7F
        if not 1 <= count <= 4:
            raise ValueError("bad length")
        length = int.from_bytes(der[pos : pos + count], "big")
        pos += count
    if pos + length > len(der) or (expect is not None and tag != expect):
        raise ValueError("bad element")
    return tag, pos, pos + length


def _time(tag: int, raw: bytes) -> datetime:
    text = raw.decode("ascii")
    if tag == 0x17:  # UTCTime: YYMMDDHHMMSSZ, years 1950-2049
        year = int(text[:2])
        text = f"{1900 + year if year >= 50 else 2000 + year}{text[2:]}"
    elif tag != 0x18:  # GeneralizedTime: YYYYMMDDHHMMSSZ
        raise ValueError("not a time")
    return datetime.strptime(text, "%Y%m%d%H%M%SZ").replace(tzinfo=UTC)
