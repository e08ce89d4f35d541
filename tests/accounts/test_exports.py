"""The public names of fairgate.accounts (the seam the web pages and the dashboard code against)."""

from __future__ import annotations

import fairgate.accounts as accounts


def test_exported_members() -> None:
    assert set(accounts.__all__) == {
        "COOKIE",
        "MAX_PASSWORD",
        "MIN_PASSWORD",
        "TEAM_ROLES",
        "Account",
        "AccountState",
        "Accounts",
        "AccountsParts",
        "EmailRejected",
        "GuessCounter",
        "Guesses",
        "OpenedSession",
        "PasswordRejected",
        "Passwords",
        "SessionView",
        "Sessions",
        "SignInRefused",
        "SignUpNotifier",
        "SsoBinding",
        "TooManyGuesses",
        "Unnotified",
        "Verdict",
        "Verifier",
        "VerifierBusy",
        "build_accounts",
        "csrf_token",
        "normalise_email",
    }
    for name in accounts.__all__:
        assert hasattr(accounts, name)
