"""The failure limiter: per network and aggregate, a sliding minute, bounded memory."""

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


def test_a_full_table_never_forgets_a_live_counter_and_holds_newcomers_back(
    clock: ManualClock,
) -> None:
    limiter = FailureLimiter(2, clock, max_networks=100)
    fail(limiter, "198.51.100.1", 2)
    clock.advance(1)
    for n in range(1000):  # a flood from many other networks, meant to evict the first
        limiter.failed(f"10.0.{n // 256}.{n % 256}")
    assert limiter.tracked == 100
    # the blocked network stays blocked: eviction cannot reset a count
    assert limiter.blocked("198.51.100.1") is not None
    assert limiter.blocked("10.0.0.5") is None  # tracked, one failure, below the limit
    # a network the full table cannot hold counts as over its limits until room frees up
    wait = limiter.blocked("10.0.3.231")
    assert wait is not None and 0 < wait <= 120
    clock.advance(wait)
    assert limiter.blocked("10.0.3.231") is None
    limiter.failed("10.0.3.231")  # stale counters make room for it
    assert limiter.tracked <= 100


def test_one_64_after_another_of_a_48_is_stopped_by_the_48_ceiling(clock: ManualClock) -> None:
    limiter = FailureLimiter(60, clock, ipv6_48=600, ipv6_32=6000)
    for n in range(600):  # one failure from each of 600 /64s: each far below 60
        limiter.failed(f"2001:db8:aa:{n:x}::1")
    assert limiter.blocked("2001:db8:aa:ffff::1") is not None  # a /64 never seen
    assert limiter.blocked("2001:db8:ab::1") is None  # the next /48
    for n in range(5400):  # 5400 more, from /48s each below its own ceiling
        limiter.failed(f"2001:db8:{0xB000 + n // 100:x}:{n % 100:x}::1")
    assert limiter.blocked("2001:db8:ffff:1::1") is not None  # the /32 is at its ceiling
    assert limiter.blocked("2001:db9::1") is None  # another /32


def test_an_ipv4_24_has_a_ceiling_of_its_own(clock: ManualClock) -> None:
    limiter = FailureLimiter(60, clock, ipv4_24=100)
    for n in range(100):
        limiter.failed(f"192.0.2.{n}")
    assert limiter.blocked("192.0.2.200") is not None
    assert limiter.blocked("::ffff:192.0.2.201") is not None
    assert limiter.blocked("192.0.3.1") is None


def test_aggregates_alone_enable_the_limiter(clock: ManualClock) -> None:
    limiter = FailureLimiter(0, clock, ipv6_48=3)
    assert limiter.enabled
    fail(limiter, "2001:db8:1:1::1", 3)
    assert limiter.blocked("2001:db8:1:2::1") is not None
    assert limiter.blocked("192.0.2.1") is None
    assert limiter.blocked("unix:/run/socket") is None


def test_networks_whose_failures_have_aged_out_are_dropped(clock: ManualClock) -> None:
    limiter = FailureLimiter(5, clock)
    for n in range(50):
        limiter.failed(f"10.0.0.{n}")
    clock.advance(200)
    for n in range(50):
        limiter.failed(f"10.0.1.{n}")
    # each new network dropped up to two stale ones on its way in
    assert limiter.tracked == 50


@pytest.mark.parametrize(
    ("per_minute", "max_networks", "ipv6_48"), [(-1, 10, 0), (5, 0, 0), (5, 10, -1)]
)
def test_negative_limits_and_empty_tables_are_refused(
    clock: ManualClock, per_minute: int, max_networks: int, ipv6_48: int
) -> None:
    with pytest.raises(ValueError):
        FailureLimiter(per_minute, clock, max_networks=max_networks, ipv6_48=ipv6_48)
