"""The dashboard pages and searches instead of loading every schedule (issue 35), in real
headless Chromium against a real uvicorn server.

124 schedules (the test app's four and 120 run-time ones): the page shows 50, Next and Previous
walk the listing's cursor, the search box asks for a name prefix and the outcome select for the
newest outcome — and each poll asks the server for one page only (read from the page's own
requests, not assumed).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.browser import chromium, require_browser
from support.servers import Server, uvicorn_server
from support.waiting import HANG
from test_dashboard_browser import click, sign_in, wait_for

OPERATOR = "operator-token-for-the-paging-test"
READER = "read-only-token-for-the-paging-test"
LIST = "/_voltro/inspect/schedules"
TENANTS = [f"tenant-{i:03d}" for i in range(120)]
DECLARED = ["heartbeat", "flaky", "dailyDigest", "invoice"]  # the app's own order

pytestmark = pytest.mark.slow


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    require_browser()
    env = {
        "VOLTRO_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'dash.db'}",
        "VOLTRO_INSPECT_TOKEN": OPERATOR,
        "VOLTRO_INSPECT_READ_TOKEN": READER,
        "VOLTRO_REPLICA_ID": "pod-a",
    }
    with uvicorn_server("apps.dashboard_app:app", tmp_path, env, name="paging") as s:
        yield s


def names_shown(driver: Any) -> list[str]:
    shown: list[str] = driver.execute_script(
        "return [...document.querySelectorAll('li.card')].map((c) => c.dataset.schedule)"
    )
    return shown


def listing_requests(driver: Any) -> list[str]:
    """The listing URLs the page fetched (its own resource timings)."""
    urls: list[str] = driver.execute_script(
        "return performance.getEntriesByType('resource').map((e) => e.name)"
        f".filter((u) => u.includes('{LIST}?'))"
    )
    return urls


def test_the_dashboard_pages_and_searches(server: Server) -> None:
    headers = {"Authorization": f"Bearer {OPERATOR}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=HANG) as http:
        for name in TENANTS:
            body = {"cron": "0 3 1 1 *", "timezone": "UTC", "handler": "cleanup"}
            r = http.put(f"{LIST}/{name}", json=body)
            assert r.status_code == 201, r.text
        # flaky's first failure is the newest outcome the status filter finds
        wait_for(
            "a failed flaky run",
            lambda: http.get(LIST, params={"status": "failed"}).json()["schedules"],
        )
    everything = DECLARED + TENANTS  # the listing's order: declared, then as written

    with chromium(1280, 1000) as driver:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import Select

        sign_in(driver, server.url, READER)
        wait_for("the first page", lambda: names_shown(driver) == everything[:50])
        # every poll asked for one page, never for every schedule
        asked = listing_requests(driver)
        assert asked and all("limit=50" in url for url in asked), asked
        pager = driver.find_element(By.ID, "pager")
        assert pager.is_displayed()
        assert driver.find_element(By.ID, "page-info").text == "page 1"
        assert not driver.find_element(By.ID, "prev-page").is_enabled()

        click(driver, driver.find_element(By.ID, "next-page"))
        wait_for("the second page", lambda: names_shown(driver) == everything[50:100])
        assert driver.find_element(By.ID, "page-info").text == "page 2"
        click(driver, driver.find_element(By.ID, "next-page"))
        wait_for("the last page", lambda: names_shown(driver) == everything[100:])
        assert not driver.find_element(By.ID, "next-page").is_enabled()
        click(driver, driver.find_element(By.ID, "prev-page"))
        wait_for("back to the second page", lambda: names_shown(driver) == everything[50:100])

        # a search starts over from the first page of the names it matches
        driver.find_element(By.ID, "search").send_keys("tenant-11")
        wait_for(
            "the search's page",
            lambda: names_shown(driver) == [f"tenant-11{i}" for i in range(10)],
        )
        assert not pager.is_displayed()  # one page holds them all
        assert any("prefix=tenant-11" in url for url in listing_requests(driver))
        search = driver.find_element(By.ID, "search")
        search.clear()
        search.send_keys("nobody")
        wait_for("no match", lambda: driver.find_element(By.ID, "no-match").is_displayed())
        assert names_shown(driver) == []
        assert not driver.find_element(By.ID, "empty").is_displayed()

        # the outcome select: only the failing schedule
        search.clear()
        search.send_keys(" ")  # an input event with an empty prefix
        Select(driver.find_element(By.ID, "status-filter")).select_by_value("failed")
        wait_for("the failing schedules", lambda: names_shown(driver) == ["flaky"])
        assert any("status=failed" in url for url in listing_requests(driver))
