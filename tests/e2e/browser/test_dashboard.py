"""The operator dashboard in Chromium: without a credential it shows nothing; with the
master key it updates by itself while load runs: its ``#updated`` and ``#pools`` change
without a reload, and the pools show the replica the load reaches."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from tests.e2e.browser.conftest import MASTER_KEY, MODEL, FrontDoor
from tests.e2e.browser.harness import Screenshots
from tests.e2e.browser.streams import stream_gaps
from tests.e2e.conftest import TEST_KEY

pytestmark = pytest.mark.slow

LOAD_SECONDS = 30.0  # the load's bound; it stops as soon as the dashboard has changed


def run_load(door: FrontDoor, stop: threading.Event) -> None:
    deadline = time.monotonic() + LOAD_SECONDS
    while not stop.is_set() and time.monotonic() < deadline:
        stream_gaps(door.url, TEST_KEY, model=MODEL, streams=4, tokens=40)


def live_text(page: Any) -> tuple[str, str]:
    return page.inner_text("#updated"), page.inner_text("#pools")


def test_the_dashboard_updates_while_load_runs(
    front_door: FrontDoor, chromium: Any, shots: Screenshots
) -> None:
    door = front_door
    refused = chromium.new_page()
    refused.goto(door.admin_url + "/admin/dashboard")
    shots.take(refused, "no-credential")
    assert "test-org" not in refused.content()
    refused.close()
    # The admin API's own credential, the master key as a bearer header on every request
    # of this browser (the page's script's polls included).
    context = chromium.new_context(extra_http_headers={"authorization": f"Bearer {MASTER_KEY}"})
    page = context.new_page()
    page.goto(door.admin_url + "/admin/dashboard")
    assert page.url.endswith("/admin/dashboard"), page.url
    shots.take(page, "dashboard-idle")
    first_updated, first_pools = live_text(page)
    loaded_at = page.evaluate("performance.timeOrigin")

    stop = threading.Event()
    load = threading.Thread(target=run_load, args=(door, stop))
    load.start()
    try:
        deadline = time.monotonic() + LOAD_SECONDS
        updated, pools = first_updated, first_pools
        while time.monotonic() < deadline:
            page.wait_for_timeout(500)
            updated, pools = live_text(page)
            if updated != first_updated and pools != first_pools:
                break
        shots.take(page, "dashboard-under-load")
    finally:
        stop.set()
        load.join()
    assert page.evaluate("performance.timeOrigin") == loaded_at  # no reload: it updated itself
    assert updated != first_updated, "#updated never changed"
    assert pools != first_pools, "#pools never changed under load"
    assert "r0" in pools and "healthy" in pools
    context.close()


def test_the_dashboard_signed_in_by_its_form_updates_under_load(
    front_door: FrontDoor, page: Any, shots: Screenshots
) -> None:
    door = front_door
    page.goto(door.admin_url + "/admin/dashboard")
    assert "/admin/signin" in page.url, page.url
    shots.take(page, "admin-sign-in")
    page.fill("input[name=secret]", MASTER_KEY)
    with page.expect_navigation():
        page.click("form button[type=submit]")
    assert MASTER_KEY not in page.url
    assert page.url.endswith("/admin/dashboard"), page.url
    shots.take(page, "dashboard-signed-in")
    first_updated, first_pools = live_text(page)
    stop = threading.Event()
    load = threading.Thread(target=run_load, args=(door, stop))
    load.start()
    try:
        deadline = time.monotonic() + LOAD_SECONDS
        updated, pools = first_updated, first_pools
        while time.monotonic() < deadline and (updated, pools) == (first_updated, first_pools):
            page.wait_for_timeout(500)
            updated, pools = live_text(page)
        shots.take(page, "dashboard-form-session-under-load")
    finally:
        stop.set()
        load.join()
    assert updated != first_updated and pools != first_pools
