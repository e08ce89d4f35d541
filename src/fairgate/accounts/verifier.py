"""A small, bounded pool of threads for password hashing, so sign-in cannot starve the proxy.

    verifier = Verifier(passwords, threads=2, queue=16)
    verdict = await verifier.verify(stored, password)     # VerifierBusy when full
    stored = await verifier.hash(password)
    verifier.close()

At most ``threads`` hashes run at once (argon2-cffi releases the GIL while it
hashes, so the event loop keeps running) and at most ``queue`` more wait for a
thread; one more is refused with :class:`VerifierBusy` at once, without
queueing, so a flood of sign-ins costs a bounded amount of CPU and memory and
gets 503 answers instead of a growing backlog. ``verifications`` counts the
hashes verified (the dummy ones included): the tests count work, not time.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeVar

from fairgate.accounts.errors import VerifierBusy
from fairgate.accounts.passwords import Verdict

__all__ = ["PasswordHashing", "Verifier"]

_T = TypeVar("_T")


class PasswordHashing(Protocol):
    """What the pool runs: ``fairgate.accounts.passwords.Passwords``."""

    def hash(self, password: str) -> str: ...

    def verify(self, stored: str | None, password: str) -> Verdict: ...


class Verifier:
    """Hashes and verifies passwords on ``threads`` threads, ``queue`` more waiting at most."""

    def __init__(self, passwords: PasswordHashing, *, threads: int, queue: int) -> None:
        if threads < 1 or queue < 0:
            raise ValueError("threads ≥ 1 and queue ≥ 0")
        self._passwords = passwords
        self._capacity = threads + queue
        self._pending = 0
        self._pool = ThreadPoolExecutor(
            max_workers=threads, thread_name_prefix="argon2", initializer=_lower_priority
        )
        self.verifications = 0

    @property
    def pending(self) -> int:
        """Hashes running or waiting now."""
        return self._pending

    async def verify(self, stored: str | None, password: str) -> Verdict:
        """``Passwords.verify`` on the pool; VerifierBusy when running + waiting is full."""
        verdict = await self._run(self._passwords.verify, stored, password)
        self.verifications += 1
        return verdict

    async def hash(self, password: str) -> str:
        """``Passwords.hash`` on the pool; VerifierBusy when running + waiting is full."""
        return await self._run(self._passwords.hash, password)

    def close(self) -> None:
        """Stop the threads (hashes already running finish)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _run(self, call: Callable[..., _T], *args: str | None) -> _T:
        """Submit ``call`` unless full. The slot is given back when the thread is done, not
        when the caller stops waiting: a client that goes away frees no CPU."""
        if self._pending >= self._capacity:
            raise VerifierBusy()
        loop = asyncio.get_running_loop()
        self._pending += 1
        try:
            future = self._pool.submit(call, *args)
        except BaseException:
            self._pending -= 1
            raise
        future.add_done_callback(lambda _: self._done(loop))
        return await asyncio.wrap_future(future)

    def _done(self, loop: asyncio.AbstractEventLoop) -> None:
        """In the worker thread: hand the slot back on the loop's thread."""
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody counts any more
            loop.call_soon_threadsafe(self._release)

    def _release(self) -> None:
        self._pending -= 1


def _lower_priority() -> None:
    """Run this hashing thread at the lowest CPU priority (Linux: nice 19, this thread only).

    A flood keeps every hashing thread busy; at normal priority they take the cores from
    the event loop and the streams it relays (measured on two cores: the p99 inter-token
    gap of streams rose to 2-2.7x under a flood). At nice 19 the scheduler hands the CPU
    to the event loop whenever it wakes, and sign-in gets what is left. Elsewhere (no
    per-thread priority) it does nothing.
    """
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
