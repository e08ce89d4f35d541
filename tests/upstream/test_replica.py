"""A replica's address checks, host header and what it shows routing."""

from __future__ import annotations

import pytest

from fairgate.engines import EngineLoad, adapter_for
from fairgate.upstream import Breaker, Replica


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def _replica(url: str = "http://10.0.0.11:8000", **kwargs: object) -> Replica:
    return Replica(
        "gpu01",
        "llama",
        url,
        1,
        None,
        adapter_for("vllm"),
        Breaker(),
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("url", "host", "joined"),
    [
        ("http://10.0.0.11:8000", b"10.0.0.11:8000", "http://10.0.0.11:8000/health"),
        ("http://10.0.0.11:8000/", b"10.0.0.11:8000", "http://10.0.0.11:8000/health"),
        ("https://engine.example.org", b"engine.example.org", "https://engine.example.org/health"),
        ("http://[::1]:9000/vllm/", b"[::1]:9000", "http://[::1]:9000/vllm/health"),
        ("http://bücher.example:80", b"xn--bcher-kva.example:80", None),
    ],
)
def test_address(url: str, host: bytes, joined: str | None) -> None:
    replica = _replica(url)
    assert replica.host_header == host
    if joined is not None:
        assert replica.url_for("/health") == joined


@pytest.mark.parametrize(
    "url",
    [
        "ftp://10.0.0.1",
        "10.0.0.1:8000",
        "http://user:pw@10.0.0.1",
        "http://10.0.0.1/?x=1",
        "http://10.0.0.1/#f",
        "http:///nohost",
    ],
)
def test_urls_that_could_leak_or_misroute_are_refused(url: str) -> None:
    with pytest.raises(ValueError):
        _replica(url)


def test_weight_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Replica("a", "m", "http://h", 0, None, adapter_for("openai"), Breaker())


def test_health_starts_unknown_and_counts_as_healthy() -> None:
    replica = _replica()
    assert replica.healthy
    assert not replica.health_known
    assert replica.set_health(True) is False  # no change for routing
    assert replica.health_known
    assert replica.set_health(False) is True
    assert replica.set_health(False) is False
    assert replica.set_health(True) is True


def test_health_flips_only_after_its_threshold_of_checks_in_a_row() -> None:
    replica = _replica()
    fall = {"unhealthy_after": 3, "healthy_after": 2}
    assert replica.set_health(False, **fall) is False
    assert replica.set_health(False, **fall) is False
    assert replica.set_health(True, **fall) is False  # a pass in between starts the count again
    assert replica.set_health(False, **fall) is False
    assert replica.set_health(False, **fall) is False
    assert replica.healthy
    assert replica.set_health(False, **fall) is True
    assert not replica.healthy
    assert replica.set_health(True, **fall) is False
    assert replica.set_health(False, **fall) is False  # still out; the pass count starts again
    assert replica.set_health(True, **fall) is False
    assert replica.set_health(True, **fall) is True
    assert replica.healthy


def test_snapshot_shows_fresh_load_and_hides_stale_load() -> None:
    clock = Clock()
    replica = _replica(clock=clock)
    replica.in_flight = 3
    replica.record_load(EngineLoad(running=4, waiting=1, kv_usage=0.5), fresh_for=10.0)
    snap = replica.snapshot()
    assert (snap.running, snap.waiting, snap.kv_usage, snap.in_flight) == (4, 1, 0.5, 3)
    clock.now += 9.9
    assert replica.snapshot().running == 4
    clock.now += 0.1
    stale = replica.snapshot()
    assert (stale.running, stale.waiting, stale.kv_usage) == (None, None, None)
    assert stale.in_flight == 3  # counted by the gateway, always known
    assert replica.load is not None  # kept for inspection, just not trusted


def test_snapshot_reports_health_and_breaker() -> None:
    replica = _replica()
    replica.set_health(False)
    for _ in range(3):
        replica.breaker.failure()
    snap = replica.snapshot()
    assert not snap.healthy
    assert snap.breaker_open
    assert (snap.name, snap.model, snap.weight) == ("gpu01", "llama", 1)
