"""Which node a stream's client certificate names, and whether it may claim a node.

A node's identity is its certificate's DNS subject alternative names, or its common
name when it has none (the TLS handshake already proved the certificate is the CA's).
Only DNS names count: an IP address, e-mail address or URI in the SAN never names a
node, and a certificate whose SANs are only of those kinds is known by its CN. gRPC's
own `x509_subject_alternative_name` mixes all kinds together, so the names are read
from the peer's certificate itself.
An agent claiming any other node is refused, and the refusal names both, so an
operator can see a copied certificate or a mistyped `--node-name`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cryptography import x509
from cryptography.x509.oid import NameOID

__all__ = ["names_of", "refusal"]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def names_of(auth_context: Mapping[str, Sequence[bytes | str]]) -> tuple[str, ...]:
    """The identities in a gRPC auth context: the client certificate's DNS SANs, else
    its CN; empty without a client certificate."""
    pems = auth_context.get("x509_pem_cert", ())
    if not pems:
        return ()
    cert = x509.load_pem_x509_certificate(_text(pems[0]).encode())
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        dns: list[str] = []
    else:
        dns = sans.get_values_for_type(x509.DNSName)
    if dns:
        return tuple(dns)
    return tuple(_text(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME))


def refusal(names: Sequence[str], claimed: str) -> str | None:
    """None when the certificate names `claimed`, else the reason for the log."""
    if not claimed:
        return "the registration names no node"
    if claimed in names:
        return None
    shown = ", ".join(names) if names else "no name"
    return f"a certificate for {shown} claimed to be node {claimed!r}"
