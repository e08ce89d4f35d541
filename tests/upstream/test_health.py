"""Active health checks against a real local server."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from fairgate.engines import adapter_for
from fairgate.upstream import Breaker, HealthChecker, Replica, ReplicaRegistry, UpstreamSessions

from .conftest import FakeEngine
from .peer import key_quoting_engine


@pytest.fixture
async def sessions() -> AsyncIterator[UpstreamSessions]:
    sessions = UpstreamSessions(connect_timeout=10.0)
    yield sessions
    await sessions.close()


def _replica(url: str, kind: str = "vllm", key: str | None = None) -> Replica:
    return Replica("gpu01", "m", url, 1, key, adapter_for(kind), Breaker())


def _checker(replica: Replica, sessions: UpstreamSessions, timeout: float = 10.0) -> HealthChecker:
    return HealthChecker(ReplicaRegistry([replica]), sessions, interval=60.0, timeout=timeout)


async def test_a_2xx_health_answer_keeps_the_replica_in(
    engine: FakeEngine, sessions: UpstreamSessions
) -> None:
    replica = _replica(engine.url)
    await _checker(replica, sessions).check_once()
    assert replica.healthy
    assert replica.health_known
    assert engine.paths() == ["/health"]


async def test_unhealthy_then_healthy_again_each_flip_logged_once(
    engine: FakeEngine, sessions: UpstreamSessions, caplog: pytest.LogCaptureFixture
) -> None:
    replica = _replica(engine.url)
    checker = _checker(replica, sessions)
    caplog.set_level(logging.INFO, logger="fairgate.upstream.health")
    engine.health_status = 503
    for _ in range(3):
        await checker.check_once()
    assert not replica.healthy
    engine.health_status = 200
    for _ in range(3):
        await checker.check_once()
    assert replica.healthy
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert "unhealthy" in messages[0]
    assert "503" in messages[0]
    assert "healthy again" in messages[1]


async def test_one_slow_answer_does_not_take_a_replica_out_two_in_a_row_do(
    engine: FakeEngine, sessions: UpstreamSessions, caplog: pytest.LogCaptureFixture
) -> None:
    replica = _replica(engine.url)
    checker = HealthChecker(
        ReplicaRegistry([replica]), sessions, interval=60.0, timeout=0.3, unhealthy_after=2
    )
    caplog.set_level(logging.INFO, logger="fairgate.upstream.health")
    engine.stall = True
    await checker.check_once()
    assert replica.healthy and replica.health_known  # one miss: still routed to
    engine.stall = False
    await checker.check_once()
    engine.stall = True
    await checker.check_once()
    assert replica.healthy  # the pass in between started the count again
    await checker.check_once()
    assert not replica.healthy
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["replica m/gpu01 is unhealthy: no answer within 0.3s"]


def test_health_thresholds_below_one_are_refused(sessions: UpstreamSessions) -> None:
    registry = ReplicaRegistry([_replica("http://127.0.0.1:1")])
    with pytest.raises(ValueError, match="at least 1"):
        HealthChecker(registry, sessions, interval=1.0, timeout=1.0, unhealthy_after=0)


async def test_a_dead_port_is_unhealthy(closed_port: int, sessions: UpstreamSessions) -> None:
    replica = _replica(f"http://127.0.0.1:{closed_port}")
    await _checker(replica, sessions).check_once()
    assert not replica.healthy


async def test_no_answer_within_the_timeout_is_unhealthy(
    engine: FakeEngine, sessions: UpstreamSessions
) -> None:
    engine.stall = True
    replica = _replica(engine.url)
    await _checker(replica, sessions, timeout=0.3).check_once()
    assert not replica.healthy


async def test_health_never_touches_the_breaker(
    engine: FakeEngine, sessions: UpstreamSessions
) -> None:
    engine.health_status = 500
    replica = _replica(engine.url)
    checker = _checker(replica, sessions)
    for _ in range(5):
        await checker.check_once()
    assert replica.breaker.state == "closed"
    assert replica.breaker.consecutive_failures == 0


async def test_openai_kind_lists_models_with_the_internal_key(
    engine: FakeEngine, sessions: UpstreamSessions
) -> None:
    replica = _replica(engine.url, kind="openai", key="sk-upstream")
    await _checker(replica, sessions).check_once()
    assert engine.paths() == ["/v1/models"]
    assert engine.seen[0].headers["Authorization"] == "Bearer sk-upstream"
    assert replica.healthy


async def test_background_loop_runs_until_stopped(
    engine: FakeEngine, sessions: UpstreamSessions
) -> None:
    replica = _replica(engine.url)
    checker = HealthChecker(ReplicaRegistry([replica]), sessions, interval=0.05, timeout=5.0)
    checker.start()
    checker.start()  # idempotent
    try:
        for _ in range(400):
            if len(engine.seen) >= 3:
                break
            await asyncio.sleep(0.025)
        assert len(engine.seen) >= 3
    finally:
        await checker.stop()
    count = len(engine.seen)
    await asyncio.sleep(0.3)
    assert len(engine.seen) == count
    await checker.stop()  # stopping twice is harmless


async def test_an_engine_quoting_its_key_in_a_broken_answer_logs_no_key(
    sessions: UpstreamSessions, caplog: pytest.LogCaptureFixture
) -> None:
    # the HTTP client's error quotes the broken status line: the key must not reach the log
    async with key_quoting_engine() as url:
        replica = _replica(url, kind="openai", key="sk-upstream-quoted")
        caplog.set_level(logging.INFO, logger="fairgate.upstream.health")
        await _checker(replica, sessions).check_once()
    assert not replica.healthy
    (message,) = [r.getMessage() for r in caplog.records]
    assert "Bad status line" in message and "Bearer [redacted]" in message
    assert "sk-upstream-quoted" not in message
