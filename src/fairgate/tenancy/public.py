"""The public JSON form of tenancy records, shared by the admin API and the CLI's ``--json``.

Internal integer ids (``id`` of a team, ``team_id``, ``user_id``…) are left
out: records are addressed by name, keys and tokens by their ULID; audit events
keep their integer id, which pages the trail (``before_id``). Timestamps are RFC 3339 in
UTC; tuples become lists. A secret appears only in what ``create`` and
``rotate`` return, once; a key created with a claim link shows the link instead.
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from datetime import datetime
from typing import Any

from fairgate.store.audit_events import AuditEvent
from fairgate.tenancy.admin_tokens import NewAdminToken
from fairgate.tenancy.claims import ClaimCreated
from fairgate.tenancy.keys import NewKey

__all__ = ["public"]

_HIDDEN = frozenset({"org_id", "team_id", "user_id", "scope_id"})


def public(record: object) -> dict[str, Any]:
    """``record`` (a store row, NewKey, NewAdminToken or ClaimCreated) as a JSON-ready dict.

    A ClaimCreated gives the key, ``claim_url`` and ``claim_expires_at``: the link, never
    the secret (the token is only inside the URL)."""
    if isinstance(record, ClaimCreated):
        return {
            **public(record.key),
            "claim_url": record.url,
            "claim_expires_at": _value(record.expires_at),
        }
    if isinstance(record, NewKey):
        return {**public(record.key), "secret": record.secret}
    if isinstance(record, NewAdminToken):
        return {**public(record.token), "secret": record.secret}
    assert is_dataclass(record) and not isinstance(record, type)
    out: dict[str, Any] = {}
    paged = isinstance(record, AuditEvent)
    for f in fields(record):
        value = getattr(record, f.name)
        if f.name in _HIDDEN or (f.name == "id" and isinstance(value, int) and not paged):
            continue
        out[f.name] = _value(value)
    return out


def _value(value: object) -> Any:
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, tuple):
        return [_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _value(v) for k, v in value.items()}
    return value
