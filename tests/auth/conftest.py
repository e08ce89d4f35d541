"""A clock the tests move by hand and an in-memory key directory (the real protocol, in memory)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter

import pytest

from fairgate.auth import (
    Authenticator,
    AuthGuard,
    FailureLimiter,
    KeyCache,
    LookupCeiling,
    ModelResolver,
    new_key,
)
from fairgate.core.errors import StoreUnavailable
from fairgate.core.principal import KeyRecord

START = 1_750_000_000.0  # a Unix time; the monotonic clock starts at 1000


class ManualClock:
    """Wall and monotonic time that move only when a test calls ``advance``."""

    def __init__(self) -> None:
        self._wall = START
        self._mono = 1000.0

    def wall(self) -> float:
        return self._wall

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        self._wall += seconds
        self._mono += seconds


class MemoryDirectory:
    """A ``KeyDirectory`` over a dict, counting lookups per digest.

    ``down`` makes it raise ``StoreUnavailable``; ``gate``, when set, holds every
    lookup until the test sets the event.
    """

    def __init__(self) -> None:
        self._records: dict[str, KeyRecord] = {}
        self.calls: Counter[bytes] = Counter()
        self.down = False
        self.gate: asyncio.Event | None = None

    def add(self, **fields: object) -> tuple[str, KeyRecord]:
        """A new key with a fresh secret; returns ``(secret, record)``."""
        secret, digest, prefix = new_key()
        values: dict[str, object] = {
            "key_id": f"k{len(self._records) + 1}",
            "org": "o",
            "team": "t",
        }
        values.update(fields)
        record = KeyRecord(prefix=prefix, secret_sha256=digest, **values)  # type: ignore[arg-type]
        self._records[record.key_id] = record
        return secret, record

    def update(self, key_id: str, **changes: object) -> KeyRecord:
        record = dataclasses.replace(self._records[key_id], **changes)  # type: ignore[arg-type]
        self._records[key_id] = record
        return record

    def rotate(self, key_id: str, grace_until: float) -> str:
        """A new secret for ``key_id``; the old one stays valid until ``grace_until``."""
        secret, digest, prefix = new_key()
        old = self._records[key_id]
        self.update(
            key_id,
            secret_sha256=digest,
            prefix=prefix,
            previous_sha256=old.secret_sha256,
            previous_until=grace_until,
        )
        return secret

    async def find_key(
        self, secret_sha256: bytes, now: float, legacy: bytes | None = None
    ) -> KeyRecord | None:
        self.calls[secret_sha256] += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.down:
            raise StoreUnavailable("connection refused")
        digests = {secret_sha256} if legacy is None else {secret_sha256, legacy}
        for record in self._records.values():
            if digests & {record.secret_sha256, record.previous_sha256}:
                return record
        return None

    async def rehash(self, key_id: str, old: bytes, new: bytes) -> None:
        record = self._records[key_id]
        if record.secret_sha256 == old:
            self.update(key_id, secret_sha256=new)
        elif record.previous_sha256 == old:
            self.update(key_id, previous_sha256=new)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def directory() -> MemoryDirectory:
    return MemoryDirectory()


def make_authenticator(
    directory: MemoryDirectory,
    clock: ManualClock,
    *,
    failures_per_minute: int = 60,
    lookups_per_minute: int = 6000,
    failures: FailureLimiter | None = None,
    cache_size: int = 100_000,
    ttl: float = 30.0,
    models: dict[str, str] | None = None,
) -> tuple[Authenticator, KeyCache]:
    """An Authenticator as the gateway builds it, with the configuration's defaults
    (``failures``, when given, replaces the per-network limiter of ``failures_per_minute``)."""
    cache = KeyCache(cache_size, ttl, cache_size, ttl, clock)
    if failures is None:
        failures = FailureLimiter(failures_per_minute, clock)
    guard = AuthGuard(failures, LookupCeiling(lookups_per_minute, clock))
    resolver = ModelResolver(models or {})
    return Authenticator(directory, cache, guard, resolver, clock), cache


def bearer(secret: str) -> bytes:
    return b"Bearer " + secret.encode()
