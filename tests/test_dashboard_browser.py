"""The dashboard in real headless Chromium against a real uvicorn server with real runs.

``apps.dashboard_app`` fires ``heartbeat`` (succeeds, every 2 s) and ``flaky`` (raises, every
3 s) on the system clock, so the timelines show runs the engine really recorded. The first test
signs in read-only, then as the operator, and drives the page the way a person would: click,
read, wait. The second writes a run-time schedule through the form as the operator (create,
edit, a refused cron, delete) and looks at it read-only. The last opens the example app
(``example_app.main:app``) after a failed Run now and takes the README's screenshot.
Screenshots land in ``$VOLTRO_TEST_ARTIFACTS`` (or the test's tmp dir); with
``VOLTRO_TEST_WRITE_DOCS_SCREENSHOT=1`` the example app's is also written to
``docs/dashboard.png``:

    VOLTRO_TEST_WRITE_DOCS_SCREENSHOT=1 pytest tests/test_dashboard_browser.py -k readme -n 0
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from support import waiting
from support.browser import WRITE_DOCS_SCREENSHOT, chromium, require_browser
from support.servers import REPO, Server, uvicorn_server
from support.waiting import HANG

OPERATOR = "operator-token-for-the-browser-test"
READER = "read-only-token-for-the-browser-test"
PAGE = "/_voltro/dashboard"
T = TypeVar("T")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def browser_ok() -> None:
    require_browser()


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


# ---- run-time schedules through the form --------------------------------------------------


def inspect(server: Server, path: str = "") -> httpx.Response:
    return httpx.get(
        f"{server.url}/_voltro/inspect/schedules{path}",
        headers={"Authorization": f"Bearer {OPERATOR}"},
        timeout=HANG,
    )


def sign_out(driver: Any) -> None:
    from selenium.webdriver.common.by import By

    click(driver, driver.find_element(By.CSS_SELECTOR, "form.signout button"))
    wait_for("the sign-in form", lambda: driver.find_elements(By.ID, "token"))


def fill(driver: Any, field: str, value: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    element = driver.find_element(By.ID, f"f-{field}")
    if element.tag_name == "select":
        Select(element).select_by_value(value)
    else:
        element.clear()
        element.send_keys(value)


def field_error(driver: Any, field: str) -> str | None:
    """The refusal shown in ``field``'s own box (the label, the input and the message sit in
    one ``[data-field]`` wrapper), or None while none is shown."""
    from selenium.webdriver.common.by import By

    box = driver.find_element(By.CSS_SELECTOR, f'.editor [data-field="{field}"]')
    note = box.find_element(By.CSS_SELECTOR, ".field-error")
    if not note.is_displayed() or not note.text:
        return None
    text: str = note.text
    return text


def save(driver: Any) -> None:
    from selenium.webdriver.common.by import By

    click(driver, driver.find_element(By.CSS_SELECTOR, "[data-action=save-schedule]"))


def test_runtime_schedules_through_the_form(server: Server, artifacts: Path) -> None:
    with chromium(1280, 1000) as driver:
        try:
            drive_runtime(driver, server, artifacts)
        except BaseException:
            driver.save_screenshot(str(artifacts / "runtime-failure.png"))
            raise


def drive_runtime(driver: Any, server: Server, artifacts: Path) -> None:
    from selenium.webdriver.common.by import By

    base = server.url
    sign_in(driver, base, OPERATOR)
    editor = driver.find_element(By.ID, "editor")
    assert not editor.is_displayed()
    # a declared schedule is the code's: no Edit, no Delete on it
    digest = card(driver, "dailyDigest")
    assert digest.find_element(By.CSS_SELECTOR, "[data-source]").text == "code"
    assert not digest.find_element(By.CSS_SELECTOR, "[data-action=edit]").is_displayed()
    assert not digest.find_element(By.CSS_SELECTOR, "[data-action=delete]").is_displayed()

    # -- New schedule: a declared name first, the server's 409 by the name ------------------
    new = driver.find_element(By.ID, "new-schedule")
    click(driver, new)
    assert editor.is_displayed() and new.get_attribute("aria-expanded") == "true"
    assert driver.find_element(By.ID, "editor-title").text == "New schedule"
    assert driver.switch_to.active_element.get_attribute("id") == "f-name"
    handlers = [
        o.get_attribute("value") for o in driver.find_elements(By.CSS_SELECTOR, "#f-handler option")
    ]
    assert handlers == ["cleanup", "tenantReport"]
    fill(driver, "name", "dailyDigest")
    fill(driver, "cron", "0 4 * * *")
    save(driver)
    declared = wait_for("the 409 by the name", lambda: field_error(driver, "name"))
    assert 'schedule "dailyDigest" is declared in code' in declared, declared
    assert driver.find_element(By.ID, "f-name").get_attribute("aria-invalid") == "true"

    # -- then a run-time one ----------------------------------------------------------------
    fill(driver, "name", "report.acme")
    fill(driver, "handler", "tenantReport")
    fill(driver, "args", '{"tenant": "acme"}')
    fill(driver, "onOverlap", "queue")
    fill(driver, "backfill", "latest")
    save(driver)
    wait_for("the form to close", lambda: not editor.is_displayed())
    assert field_error(driver, "name") is None
    wait_for(
        "the created message",
        lambda: "report.acme created" in driver.find_element(By.ID, "status").text,
    )
    report = wait_for("the new card", lambda: card(driver, "report.acme"))
    assert report.find_element(By.CSS_SELECTOR, "[data-source]").text == "runtime"
    assert report.find_element(By.CSS_SELECTOR, ".badge-runtime").is_displayed()
    assert 'Runs handler tenantReport with args {"tenant":"acme"}.' in report.text
    assert "0 4 * * *" in report.text and "queue" in report.text and "latest" in report.text
    (listed,) = [s for s in inspect(server).json()["schedules"] if s["name"] == "report.acme"]
    assert (listed["source"], listed["handler"], listed["args"], listed["onOverlap"]) == (
        "runtime",
        "tenantReport",
        {"tenant": "acme"},
        "queue",
    )
    driver.execute_script("window.scrollTo(0, 0)")
    driver.save_screenshot(str(artifacts / "runtime-created.png"))

    # -- Edit: the form prefilled; a bad cron is refused next to the cron field -------------
    click(driver, report.find_element(By.CSS_SELECTOR, "[data-action=edit]"))
    assert editor.is_displayed()
    assert driver.find_element(By.ID, "editor-title").text == "Edit report.acme"
    name = driver.find_element(By.ID, "f-name")
    assert name.get_attribute("value") == "report.acme" and name.get_attribute("readonly")
    prefilled = {
        field: driver.find_element(By.ID, f"f-{field}").get_attribute("value")
        for field in ("cron", "timezone", "handler", "onOverlap", "backfill", "maxRuntimeMs")
    }
    assert prefilled == {
        "cron": "0 4 * * *",
        "timezone": "UTC",
        "handler": "tenantReport",
        "onOverlap": "queue",
        "backfill": "latest",
        "maxRuntimeMs": "1800000",
    }
    args = driver.find_element(By.ID, "f-args").get_attribute("value")
    assert json.loads(args) == {"tenant": "acme"}
    fill(driver, "cron", "61 * * * *")
    save(driver)
    refused = wait_for("the cron refusal", lambda: field_error(driver, "cron"))
    assert refused.startswith('put_schedule("report.acme"): cron — '), refused
    cron = driver.find_element(By.ID, "f-cron")
    assert cron.get_attribute("aria-invalid") == "true"
    assert driver.switch_to.active_element == cron  # focus goes to what to fix
    assert field_error(driver, "timezone") is None and field_error(driver, "name") is None
    assert not driver.find_element(By.ID, "form-error").is_displayed()
    assert inspect(server, "/report.acme").json()["cron"] == "0 4 * * *"  # nothing written
    driver.save_screenshot(str(artifacts / "runtime-bad-cron.png"))

    fill(driver, "cron", "30 5 * * *")
    save(driver)
    wait_for("the form to close", lambda: not editor.is_displayed())
    wait_for("the edited cron", lambda: "30 5 * * *" in card(driver, "report.acme").text)
    detail = inspect(server, "/report.acme").json()
    assert detail["cron"] == "30 5 * * *" and detail["args"] == {"tenant": "acme"}
    assert [v["cron"] for v in detail["versions"]] == ["30 5 * * *", "0 4 * * *"]

    # -- read-only: the run-time schedule and its source, no controls ------------------------
    sign_out(driver)
    sign_in(driver, base, READER)
    report = wait_for("the run-time card", lambda: card(driver, "report.acme"))
    assert report.find_element(By.CSS_SELECTOR, "[data-source]").text == "runtime"
    assert "30 5 * * *" in report.text
    assert driver.find_elements(By.CSS_SELECTOR, "[data-action]") == []
    assert driver.find_elements(By.ID, "new-schedule") == []
    assert driver.find_elements(By.ID, "editor") == []
    assert driver.find_elements(By.ID, "schedule-form") == []
    driver.execute_script("window.scrollTo(0, 0)")
    driver.save_screenshot(str(artifacts / "runtime-read-only.png"))

    # -- the operator deletes it, after confirming -----------------------------------------
    sign_out(driver)
    sign_in(driver, base, OPERATOR)
    report = card(driver, "report.acme")
    delete = report.find_element(By.CSS_SELECTOR, "[data-action=delete]")
    click(driver, delete)
    confirm = report.find_element(By.CSS_SELECTOR, "[data-action=confirm-delete]")
    assert confirm.is_displayed() and not delete.is_displayed()
    assert "Delete report.acme?" in report.text
    assert inspect(server, "/report.acme").status_code == 200  # nothing before the confirm
    confirm.click()
    wait_for(
        "the card to go",
        lambda: not driver.find_elements(By.CSS_SELECTOR, 'li.card[data-schedule="report.acme"]'),
    )
    assert "report.acme is deleted" in driver.find_element(By.ID, "status").text
    assert inspect(server, "/report.acme").status_code == 404

    # -- the form on a phone: one column, nothing sideways ----------------------------------
    click(driver, driver.find_element(By.ID, "new-schedule"))
    driver.set_window_size(390, 844)
    wait_for(
        "the phone viewport",
        lambda: driver.execute_script("return document.documentElement.clientWidth") <= 390,
    )
    overflow = driver.execute_script(
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 0, f"the form scrolls sideways on a phone by {overflow}px"
    driver.save_screenshot(str(artifacts / "runtime-form-phone.png"))


# ---- every schedule paused at once: the banner ----------------------------------------------


def test_pause_all_banner_and_resume_all(server: Server, artifacts: Path) -> None:
    from selenium.webdriver.common.by import By

    auth = {"Authorization": f"Bearer {OPERATOR}"}
    until = (datetime.now().astimezone() + timedelta(hours=1)).isoformat(timespec="seconds")
    paused = httpx.post(
        f"{server.url}/_voltro/inspect/pause-all",
        headers=auth,
        json={"reason": "db upgrade", "until": until},
        timeout=HANG,
    )
    assert paused.status_code == 200, paused.text
    with chromium(1280, 900) as driver:
        try:
            # The read-only role sees the banner, without the button.
            sign_in(driver, server.url, READER)
            banner = driver.find_element(By.ID, "pause-all")
            wait_for("the banner", banner.is_displayed)
            text = driver.find_element(By.ID, "pause-all-text").text
            assert text.startswith("Every schedule is paused by the operator token"), text
            assert "“db upgrade”" in text and "then resumes itself" in text, text
            assert driver.find_elements(By.ID, "resume-all") == []
            sign_out(driver)

            sign_in(driver, server.url, OPERATOR)
            wait_for("the banner", driver.find_element(By.ID, "pause-all").is_displayed)
            heartbeat = card(driver, "heartbeat")
            note = heartbeat.find_element(By.CSS_SELECTOR, ".paused-note").text
            assert note.startswith("Paused with every schedule"), note
            # Its own Resume would change nothing: the banner's button does.
            assert not heartbeat.find_element(By.CSS_SELECTOR, "[data-action=resume]").is_enabled()
            driver.save_screenshot(str(artifacts / "dashboard-pause-all.png"))
            click(driver, driver.find_element(By.ID, "resume-all"))
            wait_for(
                "the banner gone",
                lambda: not driver.find_element(By.ID, "pause-all").is_displayed(),
            )
            wait_for(
                "heartbeat resumed",
                lambda: card(driver, "heartbeat").find_element(
                    By.CSS_SELECTOR, "[data-action=pause]"
                ),
            )
        except BaseException:
            driver.save_screenshot(str(artifacts / "pause-all-failure.png"))
            raise
    assert inspect(server).json()["pauseAll"] is None


# ---- the README's screenshot: the example app --------------------------------------------

DOCS_SCREENSHOT = REPO / "docs" / "dashboard.png"


@pytest.fixture
def example_server(tmp_path: Path, browser_ok: None) -> Iterator[Server]:
    env = {
        "VOLTRO_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'example.db'}",
        "VOLTRO_INSPECT_TOKEN": OPERATOR,
        "VOLTRO_INSPECT_READ_TOKEN": READER,
        "VOLTRO_REPLICA_ID": "pod-a",
        "VOLTRO_DEV": "",
        "EXAMPLE_EXPORT_FAIL": "1",  # brokenExport raises, as its description says
    }
    with uvicorn_server("example_app.main:app", tmp_path, env, name="example") as s:
        yield s


def test_the_readme_screenshot_is_the_example_app(example_server: Server, artifacts: Path) -> None:
    """The example app as a new user sees it: the heartbeat's runs, and a Run now of
    brokenExport that failed — shown in its header (the newest run of any trigger, though no
    clock-driven run exists yet) and at the top of its timeline."""
    server = example_server
    fired = httpx.post(
        f"{server.url}/_voltro/inspect/schedules/brokenExport/fire",
        headers={"Authorization": f"Bearer {OPERATOR}"},
        timeout=HANG,
    )
    assert fired.status_code == 202, fired.text
    run_id = fired.json()["runId"]
    wait_for(
        "the failed Run now",
        lambda: [r for r in inspect_runs(server, "brokenExport") if r["status"] == "failed"],
    )
    wait_for("two heartbeat runs", lambda: len(inspect_runs(server, "heartbeat")) >= 2)

    with chromium(1200, 1250) as driver:
        try:
            shoot(driver, server, run_id, artifacts)
        except BaseException:
            driver.save_screenshot(str(artifacts / "example-failure.png"))
            raise


def shoot(driver: Any, server: Server, run_id: str, artifacts: Path) -> None:
    from selenium.webdriver.common.by import By

    sign_in(driver, server.url, OPERATOR)
    names = [
        c.get_attribute("data-schedule") for c in driver.find_elements(By.CSS_SELECTOR, "li.card")
    ]
    assert {"dailyDigest", "brokenExport", "heartbeat", "weeklyReport"} <= set(names), names

    # the header: a failed Run now is what the card says, with its trigger on hover
    export = card(driver, "brokenExport")
    badge = export.find_element(By.CSS_SELECTOR, ".title-line .badge.status")
    assert badge.is_displayed() and badge.text.endswith("last failed"), badge.text
    assert badge.get_attribute("data-run-id") == run_id
    assert badge.get_attribute("data-trigger") == "manual"
    assert "manual run" in badge.get_attribute("title")

    expand(driver, "brokenExport")
    expand(driver, "heartbeat")
    (failed,) = wait_for("the failed row", lambda: run_rows(driver, "brokenExport"))
    assert (failed["id"], failed["status"], failed["how"]) == (run_id, "failed", "manual")
    wait_for(
        "heartbeat's runs",
        lambda: len([r for r in run_rows(driver, "heartbeat") if r["status"] == "succeeded"]) >= 2,
    )
    # the error's first line, closed: the traceback would show this machine's paths
    summary = card(driver, "brokenExport").find_element(By.CSS_SELECTOR, "li.run summary")
    assert summary.text == "RuntimeError: export target refused the connection", summary.text

    driver.execute_script("window.scrollTo(0, 0)")
    refreshes = int(driver.find_element(By.ID, "app").get_attribute("data-refreshes"))
    wait_for(  # a refresh after the clicks: the page as it stays, "updated just now"
        "a refresh",
        lambda: int(driver.find_element(By.ID, "app").get_attribute("data-refreshes")) > refreshes,
    )
    shot = artifacts / "dashboard-example.png"
    driver.save_screenshot(str(shot))
    assert shot.read_bytes().startswith(b"\x89PNG")
    if os.environ.get(WRITE_DOCS_SCREENSHOT) == "1":
        DOCS_SCREENSHOT.write_bytes(shot.read_bytes())
