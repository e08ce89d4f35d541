"""Engine metrics scraped from a real local server; failures only make load unknown."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest

from fairgate.engines import EngineLoad, MetricNames, adapter_for
from fairgate.upstream import Breaker, MetricsScraper, Replica, ReplicaRegistry, UpstreamSessions

from .conftest import FakeEngine
from .peer import key_quoting_engine


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def sessions() -> AsyncIterator[UpstreamSessions]:
    sessions = UpstreamSessions(connect_timeout=10.0)
    yield sessions
    await sessions.close()


def _replica(url: str, kind: str = "vllm", clock: Clock | None = None) -> Replica:
    return Replica("gpu01", "m", url, 1, None, adapter_for(kind), Breaker(), clock=clock or Clock())


def _scraper(replica: Replica, sessions: UpstreamSessions, **kwargs: float) -> MetricsScraper:
    settings = {"interval": 60.0, "timeout": 10.0, "stale_after": 15.0, **kwargs}
    return MetricsScraper(ReplicaRegistry([replica]), sessions, **settings)  # type: ignore[arg-type]


async def test_load_is_read_and_shown_to_routing(
    engine: FakeEngine, sessions: UpstreamSessions
) -> None:
    replica = _replica(engine.url)
    await _scraper(replica, sessions).scrape_once()
    assert replica.load == EngineLoad(running=4.0, waiting=1.0, kv_usage=0.25, preemptions=7.0)
    snap = replica.snapshot()
    assert (snap.running, snap.waiting, snap.kv_usage) == (4.0, 1.0, 0.25)
    assert engine.paths() == ["/metrics"]


async def test_stale_load_is_ignored(engine: FakeEngine, sessions: UpstreamSessions) -> None:
    clock = Clock()
    replica = _replica(engine.url, clock=clock)
    await _scraper(replica, sessions, stale_after=15.0).scrape_once()
    assert replica.load_at == clock.now
    clock.now += 14.0
    assert replica.snapshot().running == 4.0
    clock.now += 1.0
    assert replica.snapshot().running is None


@pytest.mark.parametrize("failure", ["status", "garbage", "too-big"])
async def test_a_failed_scrape_drops_the_load_and_leaves_the_breaker_closed(
    engine: FakeEngine, sessions: UpstreamSessions, failure: str
) -> None:
    replica = _replica(engine.url)
    scraper = _scraper(replica, sessions)
    await scraper.scrape_once()
    assert replica.load is not None
    if failure == "status":
        engine.metrics_status = 500
    elif failure == "garbage":
        engine.metrics_page = "vllm:num_requests_running{engine=0 broken\n"
    else:
        scraper = MetricsScraper(
            ReplicaRegistry([replica]), sessions, 60.0, 10.0, 15.0, max_bytes=4096
        )
        engine.metrics_page += "# padding\n" * 500
    for _ in range(5):
        await scraper.scrape_once()
    assert replica.load is None
    assert replica.snapshot().running is None
    assert replica.breaker.state == "closed"
    assert replica.breaker.consecutive_failures == 0
    assert replica.healthy


async def test_a_dead_metrics_port_leaves_the_breaker_closed(
    closed_port: int, sessions: UpstreamSessions
) -> None:
    replica = _replica(f"http://127.0.0.1:{closed_port}")
    replica.record_load(EngineLoad(running=1.0), fresh_for=60.0)
    await _scraper(replica, sessions).scrape_once()
    assert replica.load is None
    assert replica.breaker.state == "closed"
    assert replica.breaker.allow()


async def test_no_answer_within_the_timeout_makes_load_unknown(
    engine: FakeEngine, sessions: UpstreamSessions
) -> None:
    replica = _replica(engine.url)
    replica.record_load(EngineLoad(running=1.0), fresh_for=60.0)
    engine.stall = True
    await _scraper(replica, sessions, timeout=0.3).scrape_once()
    assert replica.load is None


async def test_kinds_without_metrics_are_not_scraped(
    engine: FakeEngine, sessions: UpstreamSessions
) -> None:
    replica = _replica(engine.url, kind="openai")
    await _scraper(replica, sessions).scrape_once()
    assert engine.seen == []
    assert replica.load is None


async def test_overridden_names_are_used(engine: FakeEngine, sessions: UpstreamSessions) -> None:
    engine.metrics_page = "sglang:num_running_reqs 6\nsglang:num_queue_reqs 2\n"
    names = MetricNames(running="sglang:num_running_reqs", waiting="sglang:num_queue_reqs")
    replica = Replica(
        "g", "m", engine.url, 1, None, adapter_for("openai", names), Breaker(), clock=Clock()
    )
    await _scraper(replica, sessions).scrape_once()
    assert replica.load == EngineLoad(running=6.0, waiting=2.0)


async def test_an_engine_quoting_its_key_in_a_broken_answer_logs_no_key(
    sessions: UpstreamSessions, caplog: pytest.LogCaptureFixture
) -> None:
    # the HTTP client's error quotes the broken status line: the key must not reach the log
    async with key_quoting_engine() as url:
        replica = Replica(
            "gpu01", "m", url, 1, "sk-upstream-quoted", adapter_for("vllm"), Breaker()
        )
        caplog.set_level(logging.INFO, logger="fairgate.upstream.scraper")
        await _scraper(replica, sessions).scrape_once()
    (message,) = [r.getMessage() for r in caplog.records]
    assert "Bad status line" in message and "Bearer [redacted]" in message
    assert "sk-upstream-quoted" not in message
