"""The provider's bearer token: one shorter than 32 bytes stops the start-up, naming the
reference and the length, never the token; rotated (in a vault) to a shorter one, the
previous token stays the one accepted."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from fairgate.auth import AuthGuard
from fairgate.auth.ceiling import LookupCeiling
from fairgate.auth.failures import FailureLimiter
from fairgate.config import ConfigError
from fairgate.config.scim import Scim
from fairgate.core.clock import SystemClock
from fairgate.observability.scim_metrics import ScimMetrics
from fairgate.scim import scim_token
from fairgate.scim.app import ScimApp
from fairgate.scim.provider import scim_provider
from fairgate.scim.reconcile import Reconciler
from fairgate.scim.storage import StoreScimStorage
from fairgate.store import Store
from fairgate.tenancy.audit import Audit


def _config(tmp_path: Path, token: str) -> Scim:
    path = tmp_path / "scim.token"
    path.write_text(token + "\n")
    return Scim.model_validate({"token_file": str(path)})


def test_a_token_shorter_than_32_bytes_is_refused_without_showing_it(tmp_path: Path) -> None:
    short = "s3cr3t-" + "x" * 24  # 31 bytes
    with pytest.raises(ConfigError) as refused:
        scim_token(_config(tmp_path, short))
    text = str(refused.value)
    assert "at least 32 bytes" in text and "(it has 31)" in text
    assert short not in text


def test_a_token_of_32_bytes_is_taken(tmp_path: Path) -> None:
    token = "s3cr3t-" + "x" * 25
    assert scim_token(_config(tmp_path, token)) == token


async def test_a_token_rotated_to_a_short_one_leaves_the_previous_in_use(
    store: Store, tmp_path: Path
) -> None:
    first, short, second = "a" * 32, "b" * 31, "c" * 40
    config = _config(tmp_path, first)
    clock = SystemClock()
    provider = scim_provider(200)
    app = ScimApp(
        StoreScimStorage(store, provider, Reconciler(config), clock),
        provider,
        token=first,
        guard=AuthGuard(FailureLimiter(60, clock), LookupCeiling(0, clock)),
        audit=Audit(store, clock),
        metrics=ScimMetrics(CollectorRegistry()),
    )
    transport = httpx.ASGITransport(app=app, client=("10.1.2.3", 40000))  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://admin.test") as http:

        async def status(token: str) -> int:
            answer = await http.get("/Users", headers={"authorization": f"Bearer {token}"})
            return answer.status_code

        app.set_token(short)
        assert await status(short) == 401
        assert await status(first) == 200
        app.set_token(second)
        assert await status(second) == 200 and await status(first) == 401
