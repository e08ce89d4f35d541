"""argon2id at OWASP's parameters or above; the dummy hash; rehash when parameters change."""

from __future__ import annotations

import pytest
from argon2 import extract_parameters

from fairgate.accounts import MAX_PASSWORD, MIN_PASSWORD, PasswordRejected, Passwords
from fairgate.accounts.passwords import check_password
from fairgate.config.web_accounts import WebAccounts

OWASP = {"memory_kib": 19456, "iterations": 2, "parallelism": 1}


def test_the_hash_is_argon2id_with_the_configured_parameters() -> None:
    stored = Passwords(**OWASP).hash("correct horse battery")
    params = extract_parameters(stored)
    assert stored.startswith("$argon2id$")
    assert (params.memory_cost, params.time_cost, params.parallelism) == (19456, 2, 1)
    assert "correct horse battery" not in stored


def test_a_matching_password_verifies_and_a_wrong_one_does_not() -> None:
    passwords = Passwords(**OWASP)
    stored = passwords.hash("correct horse battery")
    assert passwords.verify(stored, "correct horse battery").ok
    assert not passwords.verify(stored, "correct horse batterY").ok
    assert not passwords.verify("not a hash", "correct horse battery").ok


def test_the_dummy_hash_never_verifies_even_its_own_kind_of_input() -> None:
    passwords = Passwords(**OWASP)
    assert not passwords.verify(None, "correct horse battery").ok
    assert not passwords.verify(None, "").ok


def test_a_hash_with_older_parameters_asks_for_a_rehash() -> None:
    old = Passwords(**OWASP).hash("correct horse battery")
    stronger = Passwords(memory_kib=32768, iterations=3, parallelism=1)
    verdict = stronger.verify(old, "correct horse battery")
    assert verdict.ok and verdict.rehash
    fresh = stronger.hash("correct horse battery")
    assert not stronger.verify(fresh, "correct horse battery").rehash


@pytest.mark.parametrize("length", [0, 1, MIN_PASSWORD - 1, MAX_PASSWORD + 1, 100_000])
def test_a_password_outside_12_to_1024_characters_is_rejected(length: int) -> None:
    with pytest.raises(PasswordRejected):
        check_password("x" * length)


@pytest.mark.parametrize("length", [MIN_PASSWORD, MAX_PASSWORD])
def test_length_is_the_only_rule(length: int) -> None:
    assert check_password("a" * length) == "a" * length


def test_the_configuration_refuses_parameters_below_owasp() -> None:
    with pytest.raises(ValueError, match="greater than or equal"):
        WebAccounts(argon2_memory_kib=19455)
    with pytest.raises(ValueError, match="greater than or equal"):
        WebAccounts(argon2_iterations=1)
    with pytest.raises(ValueError, match="session_idle"):
        WebAccounts(session_idle=3600.0, session_lifetime=60.0)
