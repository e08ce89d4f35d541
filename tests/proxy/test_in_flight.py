"""The registry of requests in flight: which a change names, what is checked, what is cut.

Each request is a task that waits until cancelled, as a request waiting on its
engine does; ``authenticate`` is a table of verdicts per credential, counting calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest

from fairgate.auth import invalid_credential
from fairgate.core.errors import Forbidden, GatewayError, ServiceUnavailable
from fairgate.core.principal import Principal
from fairgate.proxy.exchange import Exchange
from fairgate.proxy.in_flight import InFlight


@dataclass(frozen=True, slots=True)
class Row:
    kind: str
    subject: str


class Verdicts:
    """``authenticate``: each credential's answer (valid unless told), calls counted."""

    def __init__(self) -> None:
        self.refused: dict[tuple[bytes | None, str], GatewayError] = {}
        self.calls: list[tuple[bytes | None, str]] = []

    async def __call__(self, authorization: bytes | None, client: str) -> Principal:
        self.calls.append((authorization, client))
        await asyncio.sleep(0)
        refusal = self.refused.get((authorization, client))
        if refusal is not None:
            raise refusal
        return Principal("any", "o", "t")


class Requests:
    """Requests in flight: each a task registered with ``in_flight`` until it ends."""

    def __init__(self, in_flight: InFlight) -> None:
        self.in_flight = in_flight
        self.tasks: list[asyncio.Task[None]] = []

    async def start(
        self, principal: Principal, authorization: bytes = b"Bearer k1", client: str = "10.0.0.1"
    ) -> Exchange:
        ex = Exchange(
            request_id=f"r{len(self.tasks)}", method="POST", path="/", started=0.0, client=client
        )
        ex.principal = principal
        entered = asyncio.Event()

        async def serve() -> None:
            self.in_flight.add(ex, authorization)
            entered.set()
            try:
                await asyncio.Event().wait()
            finally:
                self.in_flight.remove(ex)

        self.tasks.append(asyncio.create_task(serve()))
        await entered.wait()
        return ex

    def cancelled(self) -> list[bool]:
        return [t.cancelling() > 0 or t.cancelled() for t in self.tasks]


@pytest.fixture
def verdicts() -> Verdicts:
    return Verdicts()


@pytest.fixture
async def requests(verdicts: Verdicts) -> AsyncIterator[Requests]:
    made = Requests(InFlight(verdicts))
    yield made
    for task in made.tasks:
        task.cancel()
    await asyncio.gather(*made.tasks, return_exceptions=True)


A = Principal("ka", "org-1", "team-1", project="p")
B = Principal("kb", "org-1", "team-2")
C = Principal("kc", "org-2", "team-3")


async def test_add_and_remove_leave_nothing_behind(requests: Requests) -> None:
    await requests.start(A)
    await requests.start(A)
    assert len(requests.in_flight) == 2
    for task in requests.tasks:
        task.cancel()
    await asyncio.gather(*requests.tasks, return_exceptions=True)
    assert len(requests.in_flight) == 0
    assert requests.in_flight._by_key == {}
    requests.in_flight.remove(Exchange("r", "POST", "/", 0.0))  # never added: no error


async def test_a_revoked_key_cuts_its_requests_with_the_refusal(
    requests: Requests, verdicts: Verdicts
) -> None:
    cut, kept = await requests.start(A), await requests.start(B, b"Bearer k2")
    refusal = verdicts.refused[(b"Bearer k1", "10.0.0.1")] = invalid_credential()
    requests.in_flight.changed([Row("key", "ka")])
    assert await requests.in_flight.check() == 0
    assert cut.revoked is refusal and kept.revoked is None
    assert requests.cancelled() == [True, False]
    assert verdicts.calls == [(b"Bearer k1", "10.0.0.1")]  # only the named key checked


async def test_a_key_still_valid_after_its_change_is_not_cut(
    requests: Requests, verdicts: Verdicts
) -> None:
    ex = await requests.start(A)
    requests.in_flight.changed([Row("key", "ka")])
    await requests.in_flight.check()
    assert ex.revoked is None and requests.cancelled() == [False]
    assert len(verdicts.calls) == 1


@pytest.mark.parametrize(
    ("kind", "subject", "named"),
    [
        ("team", "team-1", {"ka"}),
        ("org", "org-1", {"ka", "kb"}),
        ("project", "team-1/p", {"ka"}),
        ("project", "team-2/p", set()),
        ("key", "unknown", set()),
        ("something-new", "x", {"ka", "kb", "kc"}),  # an unknown kind names every key
    ],
)
async def test_a_change_names_the_keys_of_its_subject(
    requests: Requests, verdicts: Verdicts, kind: str, subject: str, named: set[str]
) -> None:
    for principal in (A, B, C):
        await requests.start(principal, f"Bearer {principal.key_id}".encode())
    requests.in_flight.changed([Row(kind, subject)])
    await requests.in_flight.check()
    assert {auth.decode().removeprefix("Bearer ") for auth, _ in verdicts.calls} == named


async def test_each_credential_is_checked_once_and_all_its_requests_cut(
    requests: Requests, verdicts: Verdicts
) -> None:
    for _ in range(3):
        await requests.start(A)
    verdicts.refused[(b"Bearer k1", "10.0.0.1")] = invalid_credential()
    requests.in_flight.changed([Row("key", "ka"), Row("team", "team-1")])
    await requests.in_flight.check()
    assert len(verdicts.calls) == 1
    assert requests.cancelled() == [True, True, True]


async def test_only_the_client_an_allowlist_now_refuses_is_cut(
    requests: Requests, verdicts: Verdicts
) -> None:
    inside = await requests.start(A, client="10.0.0.1")
    outside = await requests.start(A, client="192.0.2.9")
    refusal = verdicts.refused[(b"Bearer k1", "192.0.2.9")] = Forbidden(
        "requests with this key are not allowed from this address", code="address_not_allowed"
    )
    requests.in_flight.changed([Row("team", "team-1")])
    await requests.in_flight.check()
    assert inside.revoked is None and outside.revoked is refusal
    assert requests.cancelled() == [False, True]


@pytest.mark.parametrize(
    "unable",
    [
        lambda: ServiceUnavailable("store", code="auth_unavailable"),
        lambda: RuntimeError("a bug"),
    ],
)
async def test_a_check_that_cannot_be_made_cuts_nothing_and_is_made_again(
    requests: Requests, verdicts: Verdicts, unable: Callable[[], Exception]
) -> None:
    ex = await requests.start(A)
    verdicts.refused[(b"Bearer k1", "10.0.0.1")] = unable()  # type: ignore[assignment]
    requests.in_flight.changed([Row("key", "ka")])
    assert await requests.in_flight.check() == 1
    assert ex.revoked is None and requests.cancelled() == [False]
    refusal = verdicts.refused[(b"Bearer k1", "10.0.0.1")] = invalid_credential()
    assert await requests.in_flight.check() == 0  # noted again: checked without a change
    assert ex.revoked is refusal


async def test_a_request_already_settling_is_not_cancelled(
    requests: Requests, verdicts: Verdicts
) -> None:
    ex = await requests.start(A)
    ex.complete = True
    verdicts.refused[(b"Bearer k1", "10.0.0.1")] = invalid_credential()
    requests.in_flight.changed([Row("key", "ka")])
    await requests.in_flight.check()
    assert ex.revoked is None and requests.cancelled() == [False]


async def test_run_checks_what_a_change_names_without_being_asked(
    requests: Requests, verdicts: Verdicts
) -> None:
    ex = await requests.start(A)
    runner = asyncio.create_task(requests.in_flight.run())
    try:
        verdicts.refused[(b"Bearer k1", "10.0.0.1")] = invalid_credential()
        requests.in_flight.changed([Row("org", "org-1")])
        async with asyncio.timeout(2):
            while ex.revoked is None:
                await asyncio.sleep(0.01)
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
    assert requests.cancelled() == [True]


async def test_a_change_applied_while_a_request_was_being_identified_still_cuts_it(
    verdicts: Verdicts,
) -> None:
    """The change came while the request's key lookup was under way: ``changed`` found no
    request of that key in flight, the request was held just after, and ran to its end."""
    in_flight = InFlight(verdicts)
    runner = asyncio.create_task(in_flight.run())
    mark = in_flight.mark()
    in_flight.changed([Row("key", "ka")])  # applied during the lookup: nothing held yet
    verdicts.refused[(b"Bearer k1", "10.0.0.1")] = invalid_credential()
    ex = Exchange(request_id="r", method="POST", path="/", started=0.0, client="10.0.0.1")
    ex.principal = A

    async def serve() -> None:
        in_flight.add(ex, b"Bearer k1", mark)
        try:
            await asyncio.Event().wait()
        finally:
            in_flight.remove(ex)

    task = asyncio.create_task(serve())
    try:
        for _ in range(50):
            if task.done():
                break
            await asyncio.sleep(0.01)
        assert task.cancelled() and ex.revoked is not None
        # a request identified after a change of another key is left alone
        other = Exchange(request_id="s", method="POST", path="/", started=0.0, client="10.0.0.1")
        other.principal = C
        mark = in_flight.mark()
        in_flight.changed([Row("key", "kb")])
        in_flight.add(other, b"Bearer k1", mark)
        await asyncio.sleep(0.05)
        assert other.revoked is None
        in_flight.remove(other)
    finally:
        runner.cancel()
        task.cancel()
        await asyncio.gather(runner, task, return_exceptions=True)
