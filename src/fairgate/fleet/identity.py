"""Which node a stream's client certificate names, and whether it may claim a node.

A node's identity is its certificate's DNS subject alternative names, or its common
name when it has none (the TLS handshake already proved the certificate is the CA's).
An agent claiming any other node is refused, and the refusal names both, so an
operator can see a copied certificate or a mistyped `--node-name`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["names_of", "refusal"]


def _texts(values: Sequence[bytes | str]) -> list[str]:
    return [v.decode() if isinstance(v, bytes) else v for v in values]


def names_of(auth_context: Mapping[str, Sequence[bytes | str]]) -> tuple[str, ...]:
    """The identities in a gRPC auth context: DNS SANs, else the CN; empty without a
    client certificate."""
    sans = _texts(auth_context.get("x509_subject_alternative_name", ()))
    if sans:
        return tuple(sans)
    return tuple(_texts(auth_context.get("x509_common_name", ())))


def refusal(names: Sequence[str], claimed: str) -> str | None:
    """None when the certificate names `claimed`, else the reason for the log."""
    if not claimed:
        return "the registration names no node"
    if claimed in names:
        return None
    shown = ", ".join(names) if names else "no name"
    return f"a certificate for {shown} claimed to be node {claimed!r}"
