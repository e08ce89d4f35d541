"""The bound on one Redis call, which a late event loop cannot break.

``asyncio.timeout`` cancels its block in the loop turn its timer falls due. Under a
burst (hundreds of requests' work in one turn) that can be the very turn that first
reads a reply Redis sent in time: the reply's wake-up and the timer come due together,
the timer wins, and a call Redis answered within its bound fails and counts toward the
breaker. ``Deadline`` lets two more turns pass when it falls due, one for the reply to
be read off the socket and one for the reader to hand it to its caller
(``state.scripts``): a call whose reply has come by then goes on; a call still waiting
for Redis is cancelled.

    deadline = Deadline(0.5)
    try:
        reply = await call()
    except asyncio.CancelledError:
        if deadline.expired():          # this bound, not another cancellation
            raise TimeoutError from None
        raise
    finally:
        deadline.close()
"""

from __future__ import annotations

import asyncio

__all__ = ["Deadline"]


class Deadline:
    """Cancels the current task ``seconds`` from now, two loop turns late (see above)."""

    __slots__ = ("_cancelling", "_closed", "_fired", "_handle", "_spent", "_task")

    def __init__(self, seconds: float) -> None:
        task = asyncio.current_task()
        assert task is not None
        loop = task.get_loop()
        self._task = task
        self._cancelling = task.cancelling()
        self._closed = False
        self._fired = False
        self._spent = False
        self._handle = loop.call_later(seconds, loop.call_soon, loop.call_soon, self._fire)

    def _fire(self) -> None:
        if not self._closed:
            self._fired = True
            self._task.cancel()

    @property
    def fired(self) -> bool:
        """Whether this deadline has cancelled the task (and ``expired`` not yet asked)."""
        return self._fired

    def expired(self) -> bool:
        """Call on ``CancelledError``: true when the cancellation is this deadline's only
        (and it is taken back), false for any other (a client gone, a shutdown)."""
        if not self._fired:
            return False
        self._fired = False
        self._spent = True
        return self._task.uncancel() <= self._cancelling

    @property
    def spent(self) -> bool:
        """Whether this deadline fell due and was taken back: no time is left under it."""
        return self._spent

    def close(self) -> None:
        """The call is over: the deadline no longer applies."""
        self._closed = True
        self._handle.cancel()
