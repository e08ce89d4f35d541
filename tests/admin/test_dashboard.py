"""``GET /admin/dashboard`` through the real Gateway's admin app over HTTP (ASGI), with the
simulated engine behind it: pools, organisations, bands, replicas and routing decisions on
the page, role filtering as ``GET /admin/fairshare``, fresh numbers while load runs.

The gateway: tests/admin/dashboard_gateway.py.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
import socket
from pathlib import Path

import httpx
import pytest
from tests.e2e.conftest import TEST_KEY, model, write_config

from admin.dashboard_gateway import MASTER, OPERATOR, Board, board, pg_database, sim, store_section
from fairgate.app import Gateway
from fairgate.config import load_config
from fairgate.sim.process import SimProcess

__all__ = ["board", "pg_database", "sim", "store_section"]  # the fixtures


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def _org_row(html: str, org: str) -> dict[str, str]:
    found = re.search(rf'<tr data-org="{org}">(.*?)</tr>', html, re.S)
    assert found, f"no row for {org}"
    cells = dict(re.findall(r'<td class="n (\w[\w-]*)">([^<]*)</td>', found.group(1)))
    return cells


async def _chat(proxy: httpx.AsyncClient, tokens: int) -> httpx.Response:
    return await proxy.post(
        "/v1/chat/completions",
        headers={"authorization": f"Bearer {TEST_KEY}"},
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": tokens},
    )


async def test_the_page_shows_every_pool_org_band_and_replica(board: Board) -> None:
    answer = await board.page()
    assert answer.status_code == 200, answer.text
    html = answer.text
    assert "Pool p" in html and 'data-pool="p"' in html
    assert "capacity C = 4" in html
    for org in ("A", "B"):
        assert f'data-org="{org}"' in html
    for band in ("platinum", "gold", "bronze"):
        assert f'data-band="{band}"' in html
    assert 'data-replica="r0"' in html and "healthy" in html and "closed" in html
    assert 'id="pools"' in html and 'id="updated"' in html
    assert "<svg" in html  # the chart, drawn by the server
    assert "signed in as master-key" in html


async def test_every_page_carries_the_security_headers_and_only_the_hashed_script(
    board: Board,
) -> None:
    answer = await board.page()
    csp = answer.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["cache-control"] == "no-store"
    scripts = re.findall(r"<script>(.*?)</script>", answer.text, re.S)
    assert len(scripts) == 1
    assert f"script-src {_sha256(scripts[0])}" in csp  # the one inline script, by its hash
    assert "<script src" not in answer.text and "http://" not in re.sub(
        r'xmlns="http://www.w3.org/2000/svg"', "", answer.text
    )  # no external asset
    assert '<meta http-equiv="refresh"' in answer.text  # inside <noscript>: without JavaScript
    live = await board.page("/admin/dashboard/live")
    assert live.headers["content-security-policy"] == csp
    assert live.headers["cache-control"] == "no-store"


async def test_a_wrong_key_is_refused_with_a_page_and_a_spray_gets_429(board: Board) -> None:
    wrong = await board.admin.get(
        "/admin/dashboard", headers={"authorization": "Bearer not-the-master-key"}
    )
    assert wrong.status_code == 401
    assert wrong.headers["content-type"].startswith("text/html")
    assert "not-the-master-key" not in wrong.text and MASTER not in wrong.text
    statuses = []
    for i in range(30):
        answer = await board.admin.get(
            "/admin/dashboard/live", headers={"authorization": f"Bearer wrong-{i}"}
        )
        statuses.append(answer.status_code)
    assert 429 in statuses, statuses
    assert set(statuses) <= {401, 429}
    # the master key is never locked out by a spray (as on the admin API)
    assert (await board.page()).status_code == 200


async def test_an_org_admin_sees_their_organisation_only(board: Board) -> None:
    token = await board.token_for("alice", "org_admin", org="A")
    answer = await board.admin.get("/admin/dashboard", headers={"authorization": f"Bearer {token}"})
    assert answer.status_code == 200, answer.text
    assert 'data-org="A"' in answer.text
    assert 'data-org="B"' not in answer.text
    fairshare = await board.admin.get(
        "/admin/fairshare", headers={"authorization": f"Bearer {token}"}
    )
    assert [o["org"] for p in fairshare.json()["pools"] for o in p["orgs"]] == ["A"]


async def test_a_member_is_refused_and_a_removed_role_applies_at_once(board: Board) -> None:
    member = await board.token_for("bob", "member", team="t")
    refused = await board.admin.get(
        "/admin/dashboard", headers={"authorization": f"Bearer {member}"}
    )
    assert refused.status_code == 403
    assert refused.headers["content-type"].startswith("text/html")
    viewer = await board.token_for("carol", "proxy_viewer")
    headers = {"authorization": f"Bearer {viewer}"}
    seen = await board.admin.get("/admin/dashboard/live", headers=headers)
    assert seen.status_code == 200 and 'data-org="B"' in seen.text
    await board.gateway.tenancy.roles.revoke(OPERATOR, user="carol", role="proxy_viewer")
    assert (await board.admin.get("/admin/dashboard/live", headers=headers)).status_code == 403


async def test_the_live_part_gives_fresh_numbers_while_load_runs(board: Board) -> None:
    idle = (await board.page("/admin/dashboard/live")).text
    assert _org_row(idle, "A")["within"] == "0"
    assert "No request routed since the gateway started." in idle
    load = [asyncio.create_task(_chat(board.proxy, 40)) for _ in range(6)]
    try:
        busy: dict[str, str] = {}
        queued = 0
        for _ in range(100):
            html = (await board.page("/admin/dashboard/live")).text
            busy = _org_row(html, "A")
            band = re.search(r'data-band="bronze">.*?class="n depth">(\d+)<', html, re.S)
            assert band
            queued = int(band.group(1))
            if busy["within"] == "2" and int(busy["borrowed"]) >= 1 and queued >= 1:
                break
            await asyncio.sleep(0.05)
        # A's reservation is 2 of C = 4: two within share, the rest borrowed, and bronze
        # (ceiling 0.9) waits in the gateway's queue once the pool is saturated
        assert busy["within"] == "2" and int(busy["borrowed"]) >= 1 and queued >= 1, busy
        running = 2 + int(busy["borrowed"])
        assert busy["running"] == f"{100 * running // 4} %"
        replica = re.search(r'data-replica="r0">.*?class="n in-flight">(\d+)<', html, re.S)
        assert replica and int(replica.group(1)) == running
        assert re.search(r'<td>m</td>\s*<td class="">r0</td>', html)  # a routing decision
    finally:
        answers = await asyncio.gather(*load)
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    after = (await board.page("/admin/dashboard/live")).text
    assert _org_row(after, "A")["within"] == "0" and _org_row(after, "A")["borrowed"] == "0"
    assert after != idle


async def test_the_history_grows_with_each_sample(board: Board) -> None:
    history = board.gateway.share_history
    assert history is not None
    before = len(history.series("p", "A"))
    load = asyncio.create_task(_chat(board.proxy, 40))
    await asyncio.sleep(0.5)
    await history.sample()
    await history.sample()
    await load
    points = history.series("p", "A")
    assert len(points) >= before + 2
    assert max(p.running for p in points) == pytest.approx(0.25)
    assert all(p.share == pytest.approx(0.6) for p in points)
    html = (await board.page()).text
    assert 'class="running" points="' in html  # the chart has a line now


async def test_a_dead_replica_shows_unhealthy_and_routing_says_why_it_was_left_out(
    tmp_path: Path, sim: SimProcess
) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    (tmp_path / "master.key").write_text(MASTER + "\n")
    upstreams = [{"name": "r0", "url": sim.url}, {"name": "r1", "url": dead}]
    path = await asyncio.to_thread(
        write_config,
        tmp_path,
        [model("m", sim, upstreams=upstreams)],
        master_key_file="master.key",
        logging={"level": "warning"},
    )
    gateway = Gateway(load_config(path))
    await gateway.start()
    board = Board(
        gateway,
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=gateway.admin_app), base_url="http://a"
        ),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=gateway.proxy_app), base_url="http://g"
        ),
    )
    try:
        for _ in range(100):
            html = (await board.page("/admin/dashboard/live")).text
            if re.search(r'data-replica="r1">.*?unhealthy', html, re.S):
                break
            await asyncio.sleep(0.1)
        assert re.search(r'data-replica="r1">.*?unhealthy', html, re.S), html
        assert (await _chat(board.proxy, 2)).status_code == 200
        html = (await board.page("/admin/dashboard/live")).text
        decisions = html[html.index('class="decisions"') :]
        assert re.search(r"<td>m</td>\s*<td class=\"\">r0</td>", decisions)
        assert re.search(r"health\w*: r1", decisions), decisions
        assert "No pool" not in html and 'data-pool="m"' in html  # a model without a pool
    finally:
        await board.admin.aclose()
        await board.proxy.aclose()
        await gateway.stop()
