"""The Redis call's bound: a reply read in the turn its deadline falls due is in time."""

from __future__ import annotations

import asyncio
import time

import pytest

from fairgate.state.deadline import Deadline


async def bounded(awaitable: asyncio.Future[str], seconds: float) -> str:
    deadline = Deadline(seconds)
    try:
        return await awaitable
    except asyncio.CancelledError:
        if deadline.expired():
            raise TimeoutError from None
        raise
    finally:
        deadline.close()


async def test_a_call_with_no_answer_times_out() -> None:
    never: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    with pytest.raises(TimeoutError):
        await bounded(never, 0.01)
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0  # the cancellation was taken back


async def test_a_reply_read_in_the_turn_the_deadline_falls_due_is_in_time() -> None:
    # Redis answers at 40 ms, but the loop is busy until 100 ms (a burst's work in one
    # turn): the reply and the 50 ms deadline come due in the same turn, reply first.
    # asyncio.timeout fails this call; the deadline waits two turns and lets it finish.
    loop = asyncio.get_running_loop()
    reply: asyncio.Future[str] = loop.create_future()
    loop.call_later(0.04, reply.set_result, "answered")
    loop.call_soon(time.sleep, 0.1)
    assert await bounded(reply, 0.05) == "answered"

    late: asyncio.Future[str] = loop.create_future()
    loop.call_later(0.04, late.set_result, "answered")
    loop.call_soon(time.sleep, 0.1)
    with pytest.raises(TimeoutError):  # what asyncio.timeout does with the same turn
        async with asyncio.timeout(0.05):
            await late


async def test_another_cancellation_is_not_taken_for_the_deadline() -> None:
    never: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    call = asyncio.create_task(bounded(never, 10.0))
    await asyncio.sleep(0)
    call.cancel()  # a client gone, a shutdown
    with pytest.raises(asyncio.CancelledError):
        await call


async def test_a_closed_deadline_cancels_nothing() -> None:
    done: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    done.set_result("at once")
    assert await bounded(done, 0.01) == "at once"
    await asyncio.sleep(0.05)  # past the deadline: nothing cancels this task
