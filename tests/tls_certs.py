"""Certificate authorities and certificates for the TLS tests, made with ``cryptography``.

ca = Authority("test CA")
server = ca.issue("gateway", server=True)  # SAN 127.0.0.1 and localhost
server.write(directory, "server")  # server.crt (leaf + nothing else), server.key
client = ca.issue("operator")  # a client certificate from the same CA
"""

from __future__ import annotations

import ipaddress
import os
import ssl
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["Authority", "Issued", "Pki", "encrypted_key_pem", "legacy_client_hello"]


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey, password: bytes | None = None) -> str:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password)
        if password
        else serialization.NoEncryption()
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    ).decode()


@dataclass(frozen=True)
class Issued:
    """A certificate and its private key."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def serial(self) -> int:
        return self.cert.serial_number

    @property
    def cert_pem(self) -> str:
        return self.cert.public_bytes(serialization.Encoding.PEM).decode()

    @property
    def key_pem(self) -> str:
        return _key_pem(self.key)

    def write(self, directory: Path, name: str) -> tuple[Path, Path]:
        """``name.crt`` and ``name.key`` (mode 0600) in ``directory``."""
        cert, key = directory / f"{name}.crt", directory / f"{name}.key"
        cert.write_text(self.cert_pem)
        key.write_text(self.key_pem)
        key.chmod(0o600)
        return cert, key

    def client_context(self, ca: Authority, directory: Path) -> ssl.SSLContext:
        """A client context trusting ``ca`` that presents this certificate (its files
        written to ``directory``)."""
        context = ca.trusting()
        cert, key = self.write(directory, f"client-{self.serial:x}")
        context.load_cert_chain(cert, key)
        return context


class Authority:
    """A self-signed CA that issues server and client certificates."""

    def __init__(self, name: str) -> None:
        self.key = _key()
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.now(UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(days=1))
            .not_valid_after(now + timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False
            )
            .sign(self.key, hashes.SHA256())
        )

    @property
    def pem(self) -> str:
        return self.cert.public_bytes(serialization.Encoding.PEM).decode()

    def write(self, path: Path) -> Path:
        path.write_text(self.pem)
        return path

    def trusting(self) -> ssl.SSLContext:
        """A client context that trusts only this CA."""
        return ssl.create_default_context(cadata=self.pem)

    def issue(
        self,
        name: str,
        *,
        server: bool = False,
        days: float = 30,
        not_before: datetime | None = None,
        dns_names: tuple[str, ...] = (),
        ip_addresses: tuple[str, ...] = (),
        other_sans: tuple[x509.GeneralName, ...] = (),
    ) -> Issued:
        """A certificate for ``name``: a server one (SAN 127.0.0.1, ::1, localhost and
        ``ip_addresses``) or a client one (with ``dns_names`` as its DNS SANs, if any,
        and ``other_sans`` after them)."""
        key = _key()
        start = not_before or datetime.now(UTC) - timedelta(days=1)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(start + timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                        x509.IPAddress(ipaddress.ip_address("::1")),
                        x509.DNSName("localhost"),
                        *(x509.IPAddress(ipaddress.ip_address(a)) for a in ip_addresses),
                    ]
                ),
                critical=False,
            )
        elif dns_names or other_sans:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([*(x509.DNSName(n) for n in dns_names), *other_sans]),
                critical=False,
            )
        return Issued(builder.sign(self.key, hashes.SHA256()), key)


@dataclass(frozen=True)
class Pki:
    """A test's certificates: ``ca`` issued the gateway's ``server`` certificate and is the
    one clients trust; ``other`` is a CA nobody trusts; client files go in ``directory``."""

    ca: Authority
    other: Authority
    server: Issued
    directory: Path

    @classmethod
    def make(cls, directory: Path) -> Pki:
        ca = Authority("fairgate test CA")
        return cls(ca, Authority("another CA"), ca.issue("gateway", server=True), directory)

    def client(self, issued: Issued | None = None) -> ssl.SSLContext:
        """A client trusting ``ca``, presenting ``issued`` if given."""
        if issued is None:
            return self.ca.trusting()
        return issued.client_context(self.ca, self.directory)


def encrypted_key_pem(issued: Issued, password: bytes) -> str:
    """``issued``'s key encrypted with ``password`` (a key the gateway must refuse)."""
    return _key_pem(issued.key, password)


def legacy_client_hello(version: int) -> bytes:
    """A TLS ClientHello record offering only ``version`` (0x0302: TLS 1.1, 0x0301: 1.0),
    built by hand, so that the test does not depend on what the local OpenSSL still
    offers. ECDHE suites with SHA-1 MACs, the ones these versions can use, and two
    AES-GCM ones, so that the same hello for TLS 1.2 (0x0303) is one a server accepts."""
    offered = (0xC02B, 0xC02F, 0xC013, 0xC014, 0xC009, 0xC00A, 0x002F)
    suites = b"".join(s.to_bytes(2, "big") for s in offered)
    groups = b"".join(g.to_bytes(2, "big") for g in (29, 23))  # x25519, secp256r1

    def extension(kind: int, data: bytes) -> bytes:
        return kind.to_bytes(2, "big") + len(data).to_bytes(2, "big") + data

    schemes = b"".join(a.to_bytes(2, "big") for a in (0x0403, 0x0804, 0x0401))  # SHA-256 ones
    extensions = (
        extension(10, len(groups).to_bytes(2, "big") + groups)
        + extension(11, b"\x01\x00")
        + extension(13, len(schemes).to_bytes(2, "big") + schemes)
    )
    hello = (
        version.to_bytes(2, "big")
        + os.urandom(32)
        + b"\x00"  # no session id
        + len(suites).to_bytes(2, "big")
        + suites
        + b"\x01\x00"  # compression: null only
        + len(extensions).to_bytes(2, "big")
        + extensions
    )
    handshake = b"\x01" + len(hello).to_bytes(3, "big") + hello
    return b"\x16\x03\x01" + len(handshake).to_bytes(2, "big") + handshake
