"""A graceful stop while the store is down still carries the day's counts to the next start.

The memory back end's counters are saved to the store at SIGTERM; a store that does not
answer then (PostgreSQL down) used to lose every count since the last periodic snapshot,
so the next start handed each key its day afresh. The counters are now kept in the
journal directory and restored from there at the next start.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.e2e.conftest import add_key, model, write_config
from tests.e2e.test_restart_counts import RPD, RPD_USED, chat, served_until_refused
from tests.pg_server import private_postgres_server

from fairgate.accounting.snapshots import SPARE
from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess
from fairgate.tenancy.limits import Limits

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def test_a_graceful_stop_with_the_store_down_keeps_the_days_count(tmp_path: Path) -> None:
    with private_postgres_server() as pg, SimProcess("--model", "m", "--speed", "0") as sim:
        (tmp_path / "pg.url").write_text(pg.url)
        config = write_config(
            tmp_path,
            [model("m", sim)],
            store={"url_file": "pg.url"},
            state={"backend": "memory", "snapshot_interval": "1h"},  # only the stop saves
        )
        daily = {"authorization": f"Bearer {add_key(config, 't', limits=Limits(rpd=RPD))}"}
        first = GatewayProcess(config).start()
        try:
            assert [chat(first, daily).status_code for _ in range(RPD_USED)] == [200] * RPD_USED
            pg.stop()
        finally:
            assert first.stop() == 0  # SIGTERM while the store does not answer
        pg.start()
        with GatewayProcess(config) as second:
            assert served_until_refused(second, daily) == (RPD - RPD_USED, "rpd_limit_exceeded")
            # saved into the store as the gateway started: the file is gone
            assert not (config.parent / "fairgate-journal" / SPARE).exists()
