"""The public names of auth/ are exactly these."""

from __future__ import annotations

import fairgate.auth


def test_auth_exports() -> None:
    assert sorted(fairgate.auth.__all__) == [
        "ADMIN_TOKEN_PREFIX",
        "AuthGuard",
        "AuthObserver",
        "Authenticator",
        "Change",
        "ChangeFeed",
        "ChangeWatcher",
        "FailureLimiter",
        "Grant",
        "KEY_PREFIX",
        "KeyCache",
        "KeyDirectory",
        "LookupCeiling",
        "ModelResolver",
        "Refusal",
        "Slot",
        "Waker",
        "allowed_models",
        "allows",
        "constant_time_equal",
        "invalid_credential",
        "looks_like_key",
        "new_admin_token",
        "new_key",
        "sha256",
    ]
    for name in fairgate.auth.__all__:
        assert getattr(fairgate.auth, name) is not None
