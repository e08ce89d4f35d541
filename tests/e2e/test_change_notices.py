"""Access changes reach the other gateway by Redis pub/sub, and by the poll when it is lost.

Two gateways on one SQLite store (so no PostgreSQL NOTIFY wakes anyone) and one
redis-server of the test's own; keys are cached for an hour, so the key cache
TTL cannot be what stops a key here, and the feed is polled every ``POLL`` s.

- the message arrives: a key revoked through gateway 1 is refused by gateway 2
  within one second, its subscription working (no "subscription lost" logged);
- the subscriber is cut off (gateway 2's Redis user may use no pub/sub channel,
  so its SUBSCRIBE is refused while its counters still work, and it logs so):
  every message to it is lost, and the poll still refuses the key within one
  second.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from redis import Redis
from tests.e2e.conftest import model, write_config
from tests.e2e.test_revocation import MASTER, Loop, admin, new_key, settle
from tests.redis_server import private_redis_server

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess

pytestmark = [pytest.mark.slow, pytest.mark.redis]

POLL = 0.8


def _configs(tmp_path: Path, sim: SimProcess, urls: tuple[str, str]) -> tuple[Path, Path]:
    made = []
    for name, url in zip(("one", "two"), urls, strict=True):
        directory = tmp_path / name
        directory.mkdir()
        (directory / "master.key").write_text(MASTER + "\n")
        (directory / "redis-url").write_text(url)
        state: dict[str, Any] = {
            "backend": "redis",
            "url_file": str(directory / "redis-url"),
            "prefix": "notices:",
        }
        made.append(
            write_config(
                directory,
                [model("a", sim)],
                store={"url": f"sqlite:///{tmp_path / 'shared.db'}"},
                state=state,
                auth={"key_cache_ttl": "1h", "change_poll_interval": f"{POLL}s"},
                logging={"level": "info"},
                master_key_file="master.key",
            )
        )
    return made[0], made[1]


@pytest.mark.parametrize("cut_off", [False, True], ids=["delivered", "subscriber-cut-off"])
def test_a_revocation_reaches_the_other_gateway_by_pubsub_or_by_the_poll(
    tmp_path: Path, cut_off: bool
) -> None:
    with (
        private_redis_server() as redis,
        SimProcess("--model", "a", "--speed", "0", "--ttft", "0") as sim,
    ):
        second_url = redis.url
        if cut_off:
            with Redis(port=redis.port) as root:
                # every command and key, but no pub/sub channel at all
                root.execute_command("ACL", "SETUSER", "cut", "on", ">cut-pw", "~*", "+@all")
                root.execute_command("ACL", "SETUSER", "cut", "resetchannels")
            second_url = f"redis://cut:cut-pw@127.0.0.1:{redis.port}/0"
        one, two = _configs(tmp_path, sim, (redis.url, second_url))
        key_id, secret = new_key(one)
        log = tmp_path / "second.log"
        with (
            GatewayProcess(one) as first,
            GatewayProcess(two, stderr=log) as second,
            Loop(second, secret) as loop,
        ):
            admin(first, "DELETE", f"/admin/keys/{key_id}")
            settle(loop, time.monotonic())
        lost = "access changes: Redis subscription lost" in log.read_text()
        assert lost == cut_off, log.read_text()[-2000:]
