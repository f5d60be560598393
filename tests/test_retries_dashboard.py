"""The dashboard's timeline shows a slot's attempts (``RetryPolicy``): real headless Chromium
against ``apps/retry_app.py`` on the system clock, whose ``flaky`` fails its first two
attempts of every slot and succeeds on the third — one row, "attempt 3" beside its status."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import waiting
from support.browser import chromium, require_browser
from support.servers import Server, uvicorn_server
from support.waiting import HANG

OPERATOR = "operator-token-for-the-retry-dashboard"
PAGE = "/_voltro/dashboard"

pytestmark = pytest.mark.slow


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    require_browser()
    env = {
        "VOLTRO_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'retry.db'}",
        "VOLTRO_INSPECT_TOKEN": OPERATOR,
        "VOLTRO_REPLICA_ID": "pod-a",
        "RETRY_FLAKY_CRON": "*/10 * * * * *",
        "RETRY_BACKOFF_MS": "500",
    }
    with uvicorn_server("apps.retry_app:app", tmp_path, env, name="retry-dashboard") as s:
        yield s


def _runs(server: Server) -> list[dict[str, Any]]:
    response = httpx.get(
        f"{server.url}/_voltro/inspect/schedules/runs",
        params={"name": "flaky", "limit": 50},
        headers={"Authorization": f"Bearer {OPERATOR}"},
        timeout=HANG,
    )
    response.raise_for_status()
    runs: list[dict[str, Any]] = response.json()["runs"]
    return runs


def test_the_timeline_shows_a_slots_attempts(server: Server, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    done = waiting.wait_for(
        lambda: [r for r in _runs(server) if r["status"] == "succeeded"],
        what="a flaky slot that succeeded on its third attempt",
    )[0]
    # the inspect API says it first: one row, attempt 3, no retry pending
    assert (done["attempt"], done["retryAt"], done["errorTag"]) == (3, None, None)
    with chromium(1280, 900) as driver:
        try:
            driver.get(server.url + PAGE)
            driver.find_element(By.ID, "token").send_keys(OPERATOR)
            driver.find_element(By.CSS_SELECTOR, "form.signin-form button[type=submit]").click()
            card = waiting.wait_for(
                lambda: driver.find_elements(By.CSS_SELECTOR, 'li.card[data-schedule="flaky"]'),
                what="the flaky card",
            )[0]
            expander = card.find_element(By.CSS_SELECTOR, "button.expander")
            driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", expander)
            expander.click()

            def row() -> dict[str, str] | None:
                found: dict[str, str] | None = driver.execute_script(
                    """
                    const row = document.querySelector(`li.run[data-run-id="${arguments[0]}"]`);
                    if (!row) return null;
                    const attempt = row.querySelector(".run-attempt");
                    return {status: row.querySelector(".status").textContent,
                            attempt: attempt.hidden ? "" : attempt.textContent};
                    """,
                    done["runId"],
                )
                return found

            shown = waiting.wait_for(row, what="the succeeded row in the timeline")
            assert shown == {"status": "succeeded", "attempt": "attempt 3"}
            driver.save_screenshot(str(tmp_path / "retry-timeline.png"))
        except BaseException:
            driver.save_screenshot(str(tmp_path / "failure.png"))
            raise
