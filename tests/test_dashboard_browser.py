"""The dashboard in real headless Chromium against a real uvicorn server with real runs.

``apps.dashboard_app`` fires ``heartbeat`` (succeeds, every 2 s) and ``flaky`` (raises, every
3 s) on the system clock, so the timelines show runs the engine really recorded. The test signs
in read-only, then as the operator, and drives the page the way a person would: click, read,
wait. Screenshots land in ``$VOLTRO_TEST_ARTIFACTS`` (or the test's tmp dir).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from support import waiting
from support.browser import chromium, missing
from support.servers import Server, uvicorn_server
from support.waiting import HANG

OPERATOR = "operator-token-for-the-browser-test"
READER = "read-only-token-for-the-browser-test"
PAGE = "/_voltro/dashboard"
T = TypeVar("T")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def browser_ok() -> None:
    why = missing()
    if why is not None:
        if os.environ.get("VOLTRO_TEST_REQUIRE_SERVICES") == "1":
            pytest.fail(why)
        pytest.skip(why)


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    base = os.environ.get("VOLTRO_TEST_ARTIFACTS")
    path = Path(base) if base else tmp_path / "screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def server(tmp_path: Path, browser_ok: None) -> Iterator[Server]:
    env = {
        "VOLTRO_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'dash.db'}",
        "VOLTRO_INSPECT_TOKEN": OPERATOR,
        "VOLTRO_INSPECT_READ_TOKEN": READER,
        "VOLTRO_REPLICA_ID": "pod-a",
    }
    with uvicorn_server("apps.dashboard_app:app", tmp_path, env, name="dashboard") as s:
        yield s


def wait_for(what: str, probe: Callable[[], T | None]) -> T:
    """``support.waiting.wait_for`` reading the page: an exception (a node replaced mid-read)
    is a miss like a falsy answer, and the last one is named if the wait fails."""
    errors: list[Exception] = []

    def read() -> T | None:
        try:
            return probe()
        except Exception as error:
            errors[:] = [error]
            return None

    try:
        found: T = waiting.wait_for(read, what=what)
    except AssertionError as failure:
        if not errors:
            raise
        raise AssertionError(f"{failure}; last error: {errors[-1]!r}") from errors[-1]
    return found


def sign_in(driver: Any, base: str, token: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(base + PAGE)
    field = driver.find_element(By.CSS_SELECTOR, "form.signin-form input[name=token]")
    label = driver.find_element(By.CSS_SELECTOR, "label[for=token]")
    assert label.text == "Inspect token" and field.get_attribute("id") == "token"
    field.send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "form.signin-form button[type=submit]").click()
    wait_for("the schedules", lambda: driver.find_elements(By.CSS_SELECTOR, "li.card"))


def card(driver: Any, name: str) -> Any:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, f'li.card[data-schedule="{name}"]')


def click(driver: Any, element: Any) -> None:
    # Centre it first: the sticky top bar would take a click at the very top of the viewport.
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
    element.click()


def expand(driver: Any, name: str) -> Any:
    from selenium.webdriver.common.by import By

    expander = card(driver, name).find_element(By.CSS_SELECTOR, "button.expander")
    assert expander.get_attribute("aria-expanded") == "false"
    click(driver, expander)
    assert expander.get_attribute("aria-expanded") == "true"
    return expander


def run_rows(driver: Any, name: str) -> list[dict[str, str]]:
    """The timeline of ``name`` as the browser shows it: status word, its background colour,
    the trigger · coordination cell."""
    rows: list[dict[str, str]] = driver.execute_script(
        """
        const card = document.querySelector(`li.card[data-schedule="${arguments[0]}"]`);
        return [...card.querySelectorAll("li.run")].map((row) => {
          const badge = row.querySelector(".status");
          return {
            id: row.dataset.runId,
            status: badge.textContent,
            background: getComputedStyle(badge).backgroundColor,
            color: getComputedStyle(badge).color,
            how: row.querySelector(".run-how").textContent,
          };
        });
        """,
        name,
    )
    return rows


def inspect_runs(server: Server, name: str) -> list[dict[str, Any]]:
    response = httpx.get(
        f"{server.url}/_voltro/inspect/schedules/runs",
        params={"name": name, "limit": 200},
        headers={"Authorization": f"Bearer {OPERATOR}"},
        timeout=HANG,
    )
    response.raise_for_status()
    runs: list[dict[str, Any]] = response.json()["runs"]
    return runs


def timer_passed(server: Server, name: str, horizon: datetime) -> bool:
    """Whether the app's timer is past ``horizon`` for ``name`` (its pass for every slot up to
    it is done, fired or passed over) with no firing it handed out still being run."""
    state = httpx.get(f"{server.url}/_test/timer/{name}", timeout=HANG).json()
    upcoming = state["nextFiring"]
    return (
        upcoming is not None and datetime.fromisoformat(upcoming) > horizon and not state["firing"]
    )


def test_dashboard_read_only_then_operator(server: Server, artifacts: Path) -> None:
    # real runs of both kinds exist before anyone looks
    wait_for("a succeeded heartbeat run", lambda: inspect_runs(server, "heartbeat"))
    wait_for(
        "a failed flaky run",
        lambda: [r for r in inspect_runs(server, "flaky") if r["status"] == "failed"],
    )

    with chromium(1280, 1000) as driver:
        try:
            drive(driver, server, artifacts)
        except BaseException:
            driver.save_screenshot(str(artifacts / "failure.png"))  # what the page showed
            raise


def drive(driver: Any, server: Server, artifacts: Path) -> None:
    from selenium.webdriver.common.by import By

    base = server.url
    # -- a wrong token: the form again, saying why -------------------------------------
    driver.get(base + PAGE)
    driver.find_element(By.ID, "token").send_keys("not-a-token")
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    # the POST answers with a new page: wait for it rather than read the old one mid-navigation
    error = wait_for("the sign-in error", lambda: driver.find_elements(By.ID, "signin-error"))[0]
    assert "not an inspect token" in error.text
    assert driver.find_element(By.ID, "token").get_attribute("aria-invalid") == "true"
    driver.save_screenshot(str(artifacts / "signin-wrong-token.png"))

    # -- read-only ---------------------------------------------------------------------
    sign_in(driver, base, READER)
    assert driver.find_element(By.ID, "role").text == "read-only"
    names = [
        c.get_attribute("data-schedule") for c in driver.find_elements(By.CSS_SELECTOR, "li.card")
    ]
    assert names == ["heartbeat", "flaky", "dailyDigest", "invoice"]
    wait_for(
        "the coordination", lambda: driver.find_element(By.ID, "coordination").text == "single"
    )
    # the coordination is shown once, at the top, not per schedule
    assert len(driver.find_elements(By.ID, "coordination")) == 1

    digest = card(driver, "dailyDigest")
    assert "Europe/Berlin" in digest.text and "0 9 * * *" in digest.text
    assert digest.find_element(By.CSS_SELECTOR, "[data-trigger]").text == "self"
    assert (
        card(driver, "invoice").find_element(By.CSS_SELECTOR, "[data-trigger]").text == "external"
    )
    countdown = digest.find_element(By.CSS_SELECTOR, ".countdown")
    assert re.fullmatch(r"in (\d+h \d+m|\d+m \d+s|\d+d \d+h)", countdown.text), countdown.text

    # a countdown that moves with the clock (client-side, between polls)
    ticking = card(driver, "heartbeat").find_element(By.CSS_SELECTOR, ".countdown")
    first = ticking.text
    assert re.fullmatch(r"in \d+s|due now", first), first
    wait_for("the countdown to change", lambda: ticking.text != first)

    # read-only: no Run now, no pause
    assert driver.find_elements(By.CSS_SELECTOR, "[data-action]") == []
    assert "Run now" not in driver.find_element(By.TAG_NAME, "body").text

    # expand flaky and heartbeat: the real failed and succeeded runs, colour-toned
    flaky_expander = expand(driver, "flaky")
    expand(driver, "heartbeat")
    failed = wait_for(
        "failed rows",
        lambda: [r for r in run_rows(driver, "flaky") if r["status"] == "failed"],
    )
    succeeded = wait_for(
        "succeeded rows",
        lambda: [r for r in run_rows(driver, "heartbeat") if r["status"] == "succeeded"],
    )
    assert failed[0]["background"] == "rgb(253, 232, 231)", failed[0]
    assert succeeded[0]["background"] == "rgb(230, 244, 234)", succeeded[0]
    assert failed[0]["color"] != succeeded[0]["color"]
    assert failed[0]["how"] == "self · single"

    # the error on demand: closed until asked for
    details = card(driver, "flaky").find_element(By.CSS_SELECTOR, "li.run details")
    assert details.get_attribute("open") is None
    summary = details.find_element(By.TAG_NAME, "summary")
    assert summary.text.startswith("ConnectionRefusedError: smtp.internal:25 refused")
    click(driver, summary)
    assert "refused the connection" in details.find_element(By.TAG_NAME, "pre").text

    # refreshes later (polls every 4 s): the same nodes, still expanded, still open, and
    # what the reader looks at stays where it was on screen — the page is updated in
    # place, never rebuilt (new heartbeat runs above may grow the page; the browser's
    # scroll anchoring keeps the view where it was)
    on_screen = "return Math.round(arguments[0].getBoundingClientRect().top)"
    driver.execute_script(
        "window.scrollBy(0, arguments[0].getBoundingClientRect().top - 120)", flaky_expander
    )
    top = driver.execute_script(on_screen, flaky_expander)
    assert driver.execute_script("return window.scrollY") > 0 and abs(top - 120) <= 2
    refreshes = int(driver.find_element(By.ID, "app").get_attribute("data-refreshes"))
    wait_for(
        "two refreshes",
        lambda: (
            int(driver.find_element(By.ID, "app").get_attribute("data-refreshes")) >= refreshes + 2
        ),
    )
    assert driver.find_element(By.ID, "freshness").text.startswith("updated ")
    assert flaky_expander.get_attribute("aria-expanded") == "true"  # not stale, not rebuilt
    assert details.get_attribute("open") == "true"
    assert abs(driver.execute_script(on_screen, flaky_expander) - top) <= 2
    driver.execute_script("window.scrollTo(0, 0)")
    driver.save_screenshot(str(artifacts / "dashboard-read-only.png"))

    # -- sign out, then in as the operator -----------------------------------------------
    click(driver, driver.find_element(By.CSS_SELECTOR, "form.signout button"))
    wait_for("the sign-in form", lambda: driver.find_elements(By.ID, "token"))
    sign_in(driver, base, OPERATOR)
    assert driver.find_element(By.ID, "role").text == "operator"

    digest = card(driver, "dailyDigest")
    expand(driver, "dailyDigest")
    empty = wait_for(
        "the empty state",
        lambda: (
            (text := digest.find_element(By.CSS_SELECTOR, ".timeline .empty").text).startswith(
                "No runs yet"
            )
            and text
        ),
    )
    # the countdown as span() writes it — "8m 28s" in the hour before 09:00 Berlin, "23h 5m" after
    span_re = r"(\d+d \d+h|\d+h \d+m|\d+m \d+s|\d+s)"
    assert re.match(rf"No runs yet — next firing in {span_re}\.", empty), empty

    run_now = digest.find_element(By.CSS_SELECTOR, "[data-action=run-now]")
    assert run_now.tag_name == "button"
    click(driver, run_now)
    confirm = digest.find_element(By.CSS_SELECTOR, "[data-action=confirm-run]")
    assert confirm.is_displayed() and not run_now.is_displayed()
    assert run_rows(driver, "dailyDigest") == []  # nothing fired before the confirm
    confirm.click()
    wait_for("the confirmation", lambda: "started" in driver.find_element(By.ID, "status").text)
    manual = wait_for(
        "the manual run",
        lambda: [
            r
            for r in run_rows(driver, "dailyDigest")
            if r["status"] == "succeeded" and r["how"] == "manual"
        ],
    )
    assert len(manual) == 1
    (api_run,) = inspect_runs(server, "dailyDigest")
    assert api_run["trigger"] == "manual" and api_run["runId"] == manual[0]["id"]

    driver.execute_script("window.scrollTo(0, 0)")
    driver.save_screenshot(str(artifacts / "dashboard-operator.png"))

    # -- pause: the badge with who/when, and no new runs ----------------------------------
    heartbeat = card(driver, "heartbeat")
    click(driver, heartbeat.find_element(By.CSS_SELECTOR, "[data-action=pause]"))
    badge = heartbeat.find_element(By.CSS_SELECTOR, ".badge-paused")
    wait_for("the paused badge", badge.is_displayed)
    assert badge.text == "paused"
    assert heartbeat.find_element(By.CSS_SELECTOR, ".countdown").text == "none while paused"
    note = heartbeat.find_element(By.CSS_SELECTOR, ".paused-note").text
    assert note.startswith("Paused by the operator token"), note
    resume = heartbeat.find_element(By.CSS_SELECTOR, "[data-action=resume]")
    assert resume.text == "Resume"
    assert not heartbeat.find_element(By.CSS_SELECTOR, "[data-action=run-now]").is_enabled()
    listing = httpx.get(
        f"{server.url}/_voltro/inspect/schedules",
        headers={"Authorization": f"Bearer {OPERATOR}"},
    ).json()
    (entry,) = [s for s in listing["schedules"] if s["name"] == "heartbeat"]
    assert entry["paused"] and entry["pause"]["pausedBy"] == "operator"
    paused_at = entry["pause"]["pausedAt"]
    # The timer passes two of heartbeat's slots after the pause, and every firing it handed
    # out meanwhile (flaky's) is over: a heartbeat row it wrongly wrote would be there now.
    horizon = datetime.fromisoformat(paused_at) + timedelta(seconds=4)
    wait_for("two paused slots to pass", lambda: timer_passed(server, "heartbeat", horizon))
    after = [r for r in inspect_runs(server, "heartbeat") if r["scheduledAt"] > paused_at]
    assert after == [], after
    shown = {r["id"] for r in run_rows(driver, "heartbeat")}
    newest = inspect_runs(server, "heartbeat")[0]
    assert newest["runId"] in shown and newest["scheduledAt"] <= paused_at
    driver.execute_script("window.scrollTo(0, 0)")
    driver.save_screenshot(str(artifacts / "dashboard-paused.png"))

    # -- a phone -------------------------------------------------------------------------
    driver.set_window_size(390, 844)
    wait_for(
        "the phone viewport",
        lambda: driver.execute_script("return document.documentElement.clientWidth") <= 390,
    )
    overflow = driver.execute_script(
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 0, f"the page scrolls sideways on a phone by {overflow}px"
    driver.save_screenshot(str(artifacts / "dashboard-phone.png"))
