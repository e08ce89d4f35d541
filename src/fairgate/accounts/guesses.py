"""Sign-in guess limits: every attempt charged per e-mail address and per client network.

    guesses = Guesses(state, per_address=10, per_network=100, window=900, clock=clock)
    ticket = await guesses.attempt("alice@example.org", peer)   # TooManyGuesses past a limit
    ...verify the password...
    await guesses.refund(ticket)                                 # it was right: not a guess

Per address, not per IP: an attacker spraying one address from a thousand
machines gets ``per_address`` guesses per window in all. The network ceiling
(an IPv4 address or an IPv6 /64, ``fairgate.core.network``) stops one client
trying many addresses. Each attempt is charged *before* its password is
verified, in one atomic check-and-charge of both counters (the limiter's
``CounterStore``: this process's memory, or Redis shared by every replica), so
a burst of concurrent attempts cannot slip past a limit while their hashes
run; a right password gives its charge back. The windows slide
(``fairgate.limits.window``) over ``window`` seconds.

A locked-out address is locked for its owner too until the window slides: the
price of refusing to let anyone keep guessing. Addresses are counted under
their SHA-256, never in the clear. When the state back end does not answer,
``fail_open`` (``state.fail_open``) lets attempts through uncounted (the
verifier pool still bounds their rate); otherwise sign-in answers 503
(``VerifierBusy``, the reason in the log).

Sign-ups are counted too when the caller names the network (``signups``):
``per_signup_network`` new-account attempts per network and window, so one
client cannot fill the accounts table or the operators' inbox.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Protocol

from fairgate.accounts.errors import TooManyGuesses, VerifierBusy
from fairgate.core.clock import Clock
from fairgate.core.network import network_of
from fairgate.limits import CounterStore, Lease, StateUnavailable, WindowCharge

__all__ = ["GuessCounter", "Guesses", "address_key", "network_key"]

log = logging.getLogger(__name__)


class GuessCounter(Protocol):
    """Where sign-in attempts are counted. ``attempt`` charges one against the address and
    the network (TooManyGuesses past either limit) and returns what ``refund`` takes back
    after a right password (None: nothing to give back); ``signup`` charges one sign-up to
    a network."""

    async def attempt(self, address: str, network: str) -> Lease | None: ...

    async def refund(self, ticket: Lease | None) -> None: ...

    async def signup(self, network: str) -> None: ...


def address_key(address: str) -> str:
    """The counter of an address: its SHA-256, so no address sits in Redis or memory."""
    return "signin:a:" + hashlib.sha256(address.encode()).hexdigest()


def network_key(peer: str) -> str:
    """The counter of a client address's network (an IPv4 address, an IPv6 /64)."""
    return f"signin:n:{network_of(peer)}"


class Guesses:
    """Sign-in attempts over a ``CounterStore``; see the module docstring for the rules."""

    def __init__(
        self,
        state: CounterStore,
        *,
        per_address: int,
        per_network: int,
        window: float,
        clock: Clock,
        fail_open: bool = False,
        per_signup_network: int | None = None,
    ) -> None:
        self._state = state
        self._per_signup = per_signup_network
        self._per_address = per_address
        self._per_network = per_network
        self._window = window
        self._clock = clock
        self._fail_open = fail_open

    async def attempt(self, address: str, network: str) -> Lease | None:
        charges = (
            WindowCharge(address_key(address), 1, self._per_address, self._window),
            WindowCharge(network_key(network), 1, self._per_network, self._window),
        )
        return await self._charge(charges)

    async def _charge(self, charges: tuple[WindowCharge, ...]) -> Lease | None:
        try:
            verdict = await self._state.acquire(charges, self._clock.wall())
        except StateUnavailable as exc:
            if self._fail_open:
                log.warning("sign-in guesses not counted (state unavailable): %s", exc)
                return None
            log.error("sign-in refused: the guess counters are unavailable: %s", exc)
            raise VerifierBusy() from None  # 503, try again: what the pages already render
        if verdict.lease is None:
            raise TooManyGuesses(verdict.retry_after or self._window)
        return verdict.lease

    async def signup(self, network: str) -> None:
        """Charge one sign-up to ``network``; TooManyGuesses past ``per_signup_network``."""
        if self._per_signup is None:
            return
        charge = WindowCharge(f"signup:n:{network_of(network)}", 1, self._per_signup, self._window)
        await self._charge((charge,))

    async def refund(self, ticket: Lease | None) -> None:
        if ticket is None:
            return
        try:
            await self._state.settle(ticket, {c.key: 0 for c in ticket.charges}, self._clock.wall())
        except StateUnavailable as exc:
            log.warning("sign-in guess not refunded (state unavailable): %s", exc)
