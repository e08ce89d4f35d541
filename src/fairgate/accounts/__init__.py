"""Web accounts: people who sign in with an e-mail address and a password (human credentials).

    passwords = Passwords(memory_kib=19456, iterations=2, parallelism=1)   # argon2id
    verifier = Verifier(passwords, threads=2, queue=16)                    # bounded pool
    sessions = Sessions(store, idle=1800, lifetime=43200, clock=clock)
    accounts = Accounts(store, tenancy, sessions, verifier, guesses, notifier, clock)

Separate from ``fairgate.auth`` on purpose: an API key is 256 random bits, for
which one fast SHA-256 is right; a password is chosen by a human, for which a
slow, memory-hard hash (argon2id) is right. Neither assumption leaks into the
other. ``build_accounts`` (``fairgate.accounts.build``) wires them from the
``accounts:`` configuration section. docs/security.md states the rules.

Errors (``fairgate.accounts.errors``)::

    PasswordRejected 400 · EmailRejected 400 · SignInRefused 401 ·
    TooManyGuesses 429 (retry_after) · VerifierBusy 503 ·
    NotFound 404 · Conflict 409 · Forbidden 403 (approve, suspend, delete)
"""

from fairgate.accounts.account import Account, AccountState
from fairgate.accounts.build import AccountsParts, build_accounts
from fairgate.accounts.csrf import csrf_token
from fairgate.accounts.emails import normalise_email
from fairgate.accounts.errors import (
    EmailRejected,
    PasswordRejected,
    SignInRefused,
    TooManyGuesses,
    VerifierBusy,
)
from fairgate.accounts.guesses import GuessCounter, Guesses
from fairgate.accounts.notices import SignUpNotifier, Unnotified
from fairgate.accounts.passwords import MAX_PASSWORD, MIN_PASSWORD, Passwords, Verdict
from fairgate.accounts.service import TEAM_ROLES, Accounts
from fairgate.accounts.sessions import COOKIE, OpenedSession, Sessions, SessionView, SsoBinding
from fairgate.accounts.verifier import Verifier

__all__ = [
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
]
