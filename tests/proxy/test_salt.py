"""The cache salt: one per tenant scope, keyed, stable, and saying nothing of the tenant."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from fairgate.core.principal import Principal
from fairgate.proxy.salt import CacheSalter

KEY = b"k" * 32
A1 = Principal("key1", "org-a", "team-1")
A2 = Principal("key2", "org-a", "team-2")
B1 = Principal("key3", "org-b", "team-1")


def test_org_scope_salts_organisations_apart_and_teams_alike() -> None:
    salt = CacheSalter("org", KEY)
    assert salt(A1) == salt(A2) != salt(B1)
    expected = hmac.new(KEY, b"org:org-a", hashlib.sha256).digest()
    assert salt(A1) == base64.urlsafe_b64encode(expected).rstrip(b"=").decode()
    assert "org-a" not in (salt(A1) or "")


def test_team_and_key_scopes() -> None:
    team, key = CacheSalter("team", KEY), CacheSalter("key", KEY)
    # the same team name in two organisations is two tenants
    assert len({team(A1), team(A2), team(B1)}) == 3
    assert key(A1) != key(Principal("key1x", "org-a", "team-1"))


def test_another_hmac_key_gives_other_salts_and_none_gives_no_salt() -> None:
    assert CacheSalter("org", KEY)(A1) != CacheSalter("org", b"other")(A1)
    assert CacheSalter("none", b"")(A1) is None
    with pytest.raises(ValueError, match="HMAC key"):
        CacheSalter("org", b"")


def test_a_rotated_key_changes_every_salt_at_once() -> None:
    salt = CacheSalter("org", KEY)
    before = salt(A1)
    salt.rekey(b"rotated-in-the-vault")
    assert salt(A1) != before
    assert salt(A1) == CacheSalter("org", b"rotated-in-the-vault")(A1)
    with pytest.raises(ValueError, match="non-empty"):
        salt.rekey(b"")
