"""The failure limiter: per network, a sliding minute, bounded memory."""

from __future__ import annotations

import pytest

from fairgate.auth import FailureLimiter

from .conftest import ManualClock


def fail(limiter: FailureLimiter, addr: str, times: int) -> None:
    for _ in range(times):
        limiter.failed(addr)


def test_a_network_is_blocked_after_its_limit_and_others_are_not(clock: ManualClock) -> None:
    limiter = FailureLimiter(5, clock)
    fail(limiter, "192.0.2.7", 4)
    assert limiter.blocked("192.0.2.7") is None
    limiter.failed("192.0.2.7")
    wait = limiter.blocked("192.0.2.7")
    assert wait is not None and 0 < wait <= 120
    assert limiter.blocked("192.0.2.8") is None  # IPv4: one address is one network


def test_the_retry_after_is_when_the_network_may_try_again(clock: ManualClock) -> None:
    limiter = FailureLimiter(60, clock)
    clock.advance(30)  # somewhere inside a window, not at its start
    fail(limiter, "192.0.2.7", 60)
    wait = limiter.blocked("192.0.2.7")
    assert wait is not None
    clock.advance(wait - 0.5)
    assert limiter.blocked("192.0.2.7") is not None
    clock.advance(1.0)
    assert limiter.blocked("192.0.2.7") is None


def test_the_window_slides_so_a_persistent_network_gets_about_the_limit_per_minute(
    clock: ManualClock,
) -> None:
    limiter = FailureLimiter(60, clock)
    allowed = 0
    for _ in range(600):  # ten minutes, one attempt a second, every attempt failing
        if limiter.blocked("192.0.2.7") is None:
            limiter.failed("192.0.2.7")
            allowed += 1
        clock.advance(1.0)
    assert 540 <= allowed <= 660


def test_failures_older_than_two_windows_are_forgotten(clock: ManualClock) -> None:
    limiter = FailureLimiter(3, clock)
    fail(limiter, "192.0.2.7", 3)
    assert limiter.blocked("192.0.2.7") is not None
    clock.advance(121)
    assert limiter.blocked("192.0.2.7") is None
    fail(limiter, "192.0.2.7", 2)
    assert limiter.blocked("192.0.2.7") is None


def test_ipv6_addresses_count_per_64_prefix(clock: ManualClock) -> None:
    limiter = FailureLimiter(3, clock)
    limiter.failed("2001:db8:1:2::1")
    limiter.failed("2001:db8:1:2:ffff:ffff:ffff:fffe")
    limiter.failed("2001:db8:1:2:aaaa::9")
    assert limiter.blocked("2001:db8:1:2::1234") is not None  # same /64
    assert limiter.blocked("2001:db8:1:3::1") is None  # the next /64
    assert limiter.blocked("2001:db8:1:2::") is not None


def test_an_ipv4_mapped_ipv6_address_is_its_ipv4_address(clock: ManualClock) -> None:
    limiter = FailureLimiter(2, clock)
    limiter.failed("::ffff:192.0.2.7")
    limiter.failed("192.0.2.7")
    assert limiter.blocked("192.0.2.7") is not None
    assert limiter.blocked("::ffff:192.0.2.7") is not None
    assert limiter.blocked("::ffff:192.0.2.8") is None
    # an IPv6 /64 never shares a counter with an IPv4 address
    assert limiter.blocked("::c000:207") is None


def test_an_address_that_is_not_an_ip_is_its_own_network(clock: ManualClock) -> None:
    limiter = FailureLimiter(1, clock)
    limiter.failed("")
    assert limiter.blocked("") is not None
    assert limiter.blocked("unix:/run/socket") is None


def test_zero_disables_the_limiter(clock: ManualClock) -> None:
    limiter = FailureLimiter(0, clock)
    fail(limiter, "192.0.2.7", 1000)
    assert not limiter.enabled
    assert limiter.blocked("192.0.2.7") is None
    assert limiter.tracked == 0


def test_memory_is_bounded_by_evicting_the_oldest_network(clock: ManualClock) -> None:
    limiter = FailureLimiter(2, clock, max_networks=100)
    fail(limiter, "198.51.100.1", 2)
    clock.advance(1)
    for n in range(1000):  # a flood from many other networks
        limiter.failed(f"10.0.{n // 256}.{n % 256}")
    assert limiter.tracked == 100
    # the first network's counter was evicted: it may retry; nobody else got blocked by it
    assert limiter.blocked("198.51.100.1") is None
    assert limiter.blocked("10.0.3.231") is None  # one failure each, below the limit


def test_networks_whose_failures_have_aged_out_are_dropped(clock: ManualClock) -> None:
    limiter = FailureLimiter(5, clock)
    for n in range(50):
        limiter.failed(f"10.0.0.{n}")
    clock.advance(200)
    for n in range(50):
        limiter.failed(f"10.0.1.{n}")
    # each new network dropped up to two stale ones on its way in
    assert limiter.tracked == 50


@pytest.mark.parametrize(("per_minute", "max_networks"), [(-1, 10), (5, 0)])
def test_negative_limits_and_empty_tables_are_refused(
    clock: ManualClock, per_minute: int, max_networks: int
) -> None:
    with pytest.raises(ValueError):
        FailureLimiter(per_minute, clock, max_networks=max_networks)
