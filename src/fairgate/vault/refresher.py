"""Vault secrets read before the gateway serves, then read again every ``cache_ttl``.

Each distinct location (``vault:secret/engines#key``) is read once per round,
and every :class:`~fairgate.config.secrets.SecretCell` naming it gets the value;
a cell whose value changed calls its listeners, which is how a consumer (the
upstream key, the master key's hash, the cache-salt key…) takes a rotated secret
without a restart and without any I/O on the request path.

Failure policy, written once here: at start-up every secret must be read, or
:class:`SecretsUnreadable` names each reference that could not be and why (the
process then refuses to start). Later, a failed read keeps the last value: the
failure is logged at error level (the reference named, never a value), counted
in ``fairgate_secret_refresh_failures_total{reference}``, and
``fairgate_vault_available`` is 0 until a round reads every secret again, which
is logged once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Sequence
from typing import Protocol

from pydantic import BaseModel

from fairgate.config.secrets import SecretCell, SecretRef, VaultLocation
from fairgate.vault.client import VaultClient, VaultError

__all__ = ["SecretObserver", "SecretRefresher", "SecretsUnreadable", "vault_references"]

log = logging.getLogger("fairgate.vault")


class SecretsUnreadable(Exception):
    """Start-up could not read some vault secrets: ``problems`` pairs each reference and why."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{ref}: {reason}" for ref, reason in problems))


class SecretObserver(Protocol):
    """What the refresher reports (``fairgate.observability.secret_metrics`` implements it)."""

    def refresh_failed(self, reference: str) -> None:
        """One failed read of ``reference`` after start-up."""

    def available(self, up: bool) -> None:
        """Whether the last round read every secret."""


class _Unobserved:
    def refresh_failed(self, reference: str) -> None:
        pass

    def available(self, up: bool) -> None:
        pass


def vault_references(config: BaseModel) -> list[SecretRef]:
    """Every ``vault:`` reference anywhere in ``config`` (each occurrence, in field order)."""
    return [ref for ref in _refs(config) if ref.vault is not None]


def _refs(node: object) -> Iterator[SecretRef]:
    if isinstance(node, SecretRef):
        yield node
    elif isinstance(node, BaseModel):
        for name in type(node).model_fields:
            yield from _refs(getattr(node, name))
    elif isinstance(node, tuple | list):
        for item in node:
            yield from _refs(item)


class SecretRefresher:
    """Reads every vault reference in ``refs`` through ``client``; ``run`` keeps them fresh."""

    def __init__(
        self,
        refs: Sequence[SecretRef],
        client: VaultClient,
        *,
        interval: float,
        observer: SecretObserver | None = None,
    ) -> None:
        self._cells: dict[VaultLocation, list[SecretCell]] = {}
        for ref in refs:
            if ref.vault is not None:
                self._cells.setdefault(ref.vault, []).append(ref.cell)
        self._client = client
        self._interval = interval
        self._observer: SecretObserver = observer or _Unobserved()
        self._failing: set[VaultLocation] = set()

    async def read_all(self) -> None:
        """Read every secret now; :class:`SecretsUnreadable` listing those that failed."""
        problems: list[tuple[str, str]] = []
        for location, cells in self._cells.items():
            try:
                value = await self._client.read(location)
            except VaultError as exc:
                problems.append((str(location), str(exc)))
                continue
            for cell in cells:
                cell.set(value)
        if problems:
            raise SecretsUnreadable(problems)

    async def refresh(self) -> None:
        """One round: each secret read again; a failure keeps the last value and is reported."""
        for location, cells in self._cells.items():
            try:
                value = await self._client.read(location)
            except VaultError as exc:
                self._observer.refresh_failed(str(location))
                self._failing.add(location)
                log.error(
                    "vault secret %s could not be read again, the last value read stays in use: %s",
                    location,
                    exc,
                )
                continue
            if location in self._failing:
                self._failing.discard(location)
                log.warning("vault secret %s is read again", location)
            changed = [cell.set(value) for cell in cells]
            if any(changed):
                log.info("vault secret %s changed: the new value is in use", location)
        self._observer.available(not self._failing)

    async def run(self) -> None:
        """Refresh every ``interval`` and keep the token renewed in between, until cancelled."""
        loop = asyncio.get_running_loop()
        due = loop.time() + self._interval
        self._observer.available(True)
        while True:
            renew = self._client.renew_in()
            wait = due - loop.time() if renew is None else min(due - loop.time(), renew)
            await asyncio.sleep(max(wait, 0.0))
            if loop.time() >= due:
                due = loop.time() + self._interval
                await self.refresh()
                continue
            try:
                await self._client.keep_token()
            except VaultError as exc:
                log.error("vault token could not be renewed: %s", exc)
                await asyncio.sleep(min(self._interval, 5.0))

    async def close(self) -> None:
        await self._client.close()
