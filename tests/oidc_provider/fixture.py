"""The test provider as a child process, and a pytest fixture that starts one per test.

    def test_x(oidc_provider):
        token = oidc_provider.mint(sub="alice", groups=["physics"])
        ...
        assert oidc_provider.stats()["jwks"] <= 1

Use it from a conftest with ``from tests.oidc_provider.fixture import oidc_provider``
(``start_oidc_provider`` when a test needs several providers or options).
"""

from __future__ import annotations

import os
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from tests.oidc_provider.server import READY_PREFIX

from fairgate.sim.process import ServerProcess

__all__ = ["OidcProvider", "StartOidcProvider", "oidc_provider", "start_oidc_provider"]

_ROOT = Path(__file__).resolve().parents[2]


class OidcProvider(ServerProcess):
    """``python -m tests.oidc_provider`` on a free loopback port; ``url`` is its issuer."""

    def __init__(self, *args: str, stderr: Path | None = None) -> None:
        path = os.pathsep.join(p for p in (str(_ROOT), os.environ.get("PYTHONPATH", "")) if p)
        super().__init__(
            [sys.executable, "-m", "tests.oidc_provider", "--port", "0", *args],
            READY_PREFIX,
            env={"PYTHONPATH": path},
            stderr=stderr,
        )

    @property
    def issuer(self) -> str:
        return self.url

    def mint(
        self,
        *,
        header: dict[str, Any] | None = None,
        kid: str | None = None,
        alg: str | None = None,
        omit: tuple[str, ...] = (),
        attack: str | None = None,
        **claims: Any,
    ) -> str:
        """A token over ``claims`` (the registered ones filled in unless ``omit`` names them)."""
        body: dict[str, Any] = {"claims": claims, "omit": list(omit)}
        for name, value in (("header", header), ("kid", kid), ("alg", alg), ("attack", attack)):
            if value is not None:
                body[name] = value
        token: str = self.call("POST", "/_test/mint", body)["token"]
        return token

    def rotate(self, *, alg: str = "RS256", drop_old: bool = False) -> str:
        """A new active signing key; its kid."""
        kid: str = self.call("POST", "/_test/rotate", {"alg": alg, "drop_old": drop_old})["kid"]
        return kid

    def faults(self, **statuses: int) -> None:
        """``discovery=503`` / ``jwks=500``: answer that status (0 clears it)."""
        self.call("POST", "/_test/faults", statuses)

    def stats(self) -> dict[str, Any]:
        """Fetch counts (``discovery``, ``jwks``, ``minted``), the kids and the active one."""
        result: dict[str, Any] = self.call("GET", "/_test/stats")
        return result

    def reset(self) -> None:
        self.call("POST", "/_test/reset", {})

    def call(self, method: str, path: str, body: object = None) -> Any:
        data = orjson.dumps(body) if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            request.add_header("content-type", "application/json")
        with urllib.request.urlopen(request, timeout=30) as response:
            return orjson.loads(response.read())


StartOidcProvider = Callable[..., OidcProvider]


@pytest.fixture
def start_oidc_provider() -> Iterator[StartOidcProvider]:
    """Start providers (``*args`` are the command line's options); all stopped after the test."""
    started: list[OidcProvider] = []

    def start(*args: str) -> OidcProvider:
        provider = OidcProvider(*args).start()
        started.append(provider)
        return provider

    yield start
    for provider in started:
        provider.stop()


@pytest.fixture
def oidc_provider(start_oidc_provider: StartOidcProvider) -> OidcProvider:
    """One provider with the default options, stopped after the test."""
    return start_oidc_provider()
