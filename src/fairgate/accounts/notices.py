"""How operators hear of a pending sign-up: the Protocol the alert channels implement."""

from __future__ import annotations

from typing import Protocol

from fairgate.accounts.account import Account

__all__ = ["SignUpNotifier", "Unnotified"]


class SignUpNotifier(Protocol):
    """Tells operators that ``account`` waits for approval, at most once per account.

    Called off the request path (the sign-up answer never waits for it, so its
    timing cannot tell a new address from a known one). The message names the
    address and the command that approves it; never a password or a key.
    """

    async def pending_sign_up(self, account: Account) -> None: ...


class Unnotified:
    """No alert channel configured: operators find pending sign-ups with
    ``fairgate accounts list --pending``."""

    async def pending_sign_up(self, account: Account) -> None:
        return None
