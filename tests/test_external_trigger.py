"""The external trigger over real HTTP: uvicorn on 127.0.0.1 running ``apps.external_app``.

The server's clock is a ManualClock moved with ``POST /_test/clock``: each test works on its own
day so the ledger one module-scoped server accumulates never mixes them up.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.cluster import fetch_runs
from support.external import (
    APP,
    INSPECT_AUTH,
    INSPECT_TOKEN,
    TRIGGER_AUTH,
    TRIGGER_TOKEN,
    base_env,
    get_run,
    held,
    markers,
    poll_terminal,
    set_clock,
    trigger,
)
from support.servers import REPO, Server, uvicorn_server
from support.waiting import HANG

from fastapi_voltro_schedules.enums import Trigger

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("external")


@pytest.fixture(scope="module")
def db_url(workdir: Path) -> str:
    return f"sqlite+aiosqlite:///{workdir / 'voltro.db'}"


@pytest.fixture(scope="module")
def marker_dir(workdir: Path) -> Path:
    d = workdir / "markers"
    d.mkdir()
    return d


@pytest.fixture(scope="module")
def server(workdir: Path, db_url: str, marker_dir: Path) -> Iterator[Server]:
    env = base_env(db_url, marker_dir, EXT_HANDLER_SECONDS="0.3")
    with uvicorn_server(APP, workdir, env, name="external") as s:
        yield s


# --------------------------------------------------------------------------- accepted


def test_first_arrival_is_accepted_and_runs_once(server: Server, marker_dir: Path) -> None:
    set_clock(server, "2026-03-02T09:00:30+00:00")
    r = trigger(server, "hourly")
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["status"] == "accepted"
    assert re.fullmatch(r"sr_[0-9a-f]{32}", body["runId"])
    assert body["scheduledAt"] == "2026-03-02T09:00:00.000Z"
    final = poll_terminal(server, body["runId"])[-1]
    assert final["status"] == "succeeded"
    assert len(markers(marker_dir, "hourly", "20260302T090000")) == 1


def test_poll_until_terminal(server: Server, marker_dir: Path) -> None:
    set_clock(server, "2026-03-03T10:00:05+00:00")
    with held(marker_dir):  # the handler finishes only once the test lets it
        r = trigger(server, "hourly")
        assert r.status_code == 202, r.text
        run_id = r.json()["runId"]
        # the first poll (right after the 202) sees it running
        first = get_run(server, run_id).json()
    seen = [first, *poll_terminal(server, run_id)]
    assert seen[0]["status"] == "running" and seen[0]["terminal"] is False
    assert seen[0]["finishedAt"] is None
    final = seen[-1]
    assert final == {
        "runId": run_id,
        "name": "hourly",
        "status": "succeeded",
        "terminal": True,
        "scheduledAt": "2026-03-03T10:00:00.000Z",
        "firedAt": "2026-03-03T10:00:05.000Z",
        "finishedAt": final["finishedAt"],
        "errorTag": None,
        "error": None,
        "traceback": None,
    }
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", final["finishedAt"])


def test_a_failing_run_polls_to_failed(server: Server) -> None:
    set_clock(server, "2026-03-03T09:31:00+00:00")
    r = trigger(server, "failing")
    assert r.status_code == 202, r.text
    final = poll_terminal(server, r.json()["runId"])[-1]
    assert (final["status"], final["errorTag"], final["error"]) == (
        "failed",
        "RuntimeError",
        "boom",
    )


# --------------------------------------------------------------------------- duplicates


def test_same_occurrence_again_is_a_duplicate_with_the_first_run_id(
    server: Server, db_url: str, marker_dir: Path
) -> None:
    set_clock(server, "2026-03-05T09:00:10+00:00")
    first = trigger(server, "hourly")
    assert first.status_code == 202, first.text
    run_id = first.json()["runId"]
    set_clock(server, "2026-03-05T09:03:00+00:00")  # a retry, later but in budget
    again = [trigger(server, "hourly") for _ in range(3)]
    stated = trigger(server, "hourly", {"X-Voltro-Scheduled-At": "2026-03-05T09:00:00Z"})
    for r in [*again, stated]:
        assert r.status_code == 200, r.text
        assert r.json() == {
            "status": "duplicate",
            "runId": run_id,
            "scheduledAt": "2026-03-05T09:00:00.000Z",
        }
    poll_terminal(server, run_id)
    assert len(markers(marker_dir, "hourly", "20260305T090000")) == 1
    rows = [r for r in fetch_runs(db_url, "hourly") if r.scheduled_at.day == 5]
    assert [(r.id, r.trigger, r.coordination_outcome.value) for r in rows] == [
        (run_id, Trigger.EXTERNAL, "external")
    ]


# --------------------------------------------------------------------------- refusals


def test_off_cadence_is_409_naming_the_cadence(server: Server) -> None:
    set_clock(server, "2026-03-06T10:30:00+00:00")
    r = trigger(server, "hourly")
    assert r.status_code == 409, r.text
    body = r.json()
    assert body["code"] == "off_cadence"
    assert body["cron"] == "0 * * * *" and body["timezone"] == "UTC"
    assert '"0 * * * *"' in body["detail"] and "UTC" in body["detail"]
    assert body["previousOccurrence"] == "2026-03-06T10:00:00.000Z"
    assert body["skewBudgetMs"] == 300_000


def test_off_cadence_in_a_zone_names_the_zone(server: Server) -> None:
    set_clock(server, "2026-03-07T08:03:00+00:00")  # Saturday
    r = trigger(server, "berlinWeekday")
    assert r.status_code == 409, r.text
    body = r.json()
    assert (body["cron"], body["timezone"]) == ("0 9 * * 1-5", "Europe/Berlin")
    assert "Europe/Berlin" in body["detail"]
    set_clock(server, "2026-03-09T08:03:00+00:00")  # Monday, 09:03 in Berlin
    r = trigger(server, "berlinWeekday")
    assert r.status_code == 202, r.text
    assert r.json()["scheduledAt"] == "2026-03-09T08:00:00.000Z"


def test_a_stated_future_time_is_409(server: Server) -> None:
    set_clock(server, "2026-03-10T08:59:00+00:00")
    r = trigger(server, "hourly", {"X-Voltro-Scheduled-At": "2026-03-10T09:00:00Z"})
    assert r.status_code == 409, r.text
    assert r.json()["code"] == "future"
    # nothing was claimed: the real firing is accepted when it comes
    set_clock(server, "2026-03-10T09:00:01+00:00")
    r = trigger(server, "hourly")
    assert r.status_code == 202, r.text


def test_a_stated_time_within_the_tolerance_is_now(server: Server) -> None:
    set_clock(server, "2026-03-10T09:59:59+00:00")  # a second behind the caller's clock
    r = trigger(server, "hourly", {"X-Voltro-Scheduled-At": "2026-03-10T10:00:00Z"})
    assert r.status_code == 202, r.text
    assert r.json()["scheduledAt"] == "2026-03-10T10:00:00.000Z"


@pytest.mark.parametrize(
    ("now", "status"),
    [
        ("2026-03-11T11:05:00+00:00", 202),  # exactly the 5-minute budget: in
        ("2026-03-11T12:05:00.001000+00:00", 409),  # a millisecond more: out
        ("2026-03-11T13:04:59.999000+00:00", 202),
    ],
)
def test_skew_budget_edge(server: Server, now: str, status: int) -> None:
    set_clock(server, now)
    r = trigger(server, "hourly")
    assert r.status_code == status, r.text


def test_a_minute_cadence_budget_is_its_period(server: Server) -> None:
    # 90 s late for 09:00 with a 5-minute skew: lands on 09:01, never back on 09:00
    set_clock(server, "2026-03-12T09:01:30+00:00")
    late = trigger(server, "minutely")
    assert late.status_code == 202, late.text
    assert late.json()["scheduledAt"] == "2026-03-12T09:01:00.000Z"
    poll_terminal(server, late.json()["runId"])  # else on_overlap="skip" stands the next down
    stated = trigger(server, "minutely", {"X-Voltro-Scheduled-At": "2026-03-12T09:00:59Z"})
    assert stated.status_code == 202, stated.text
    assert stated.json()["scheduledAt"] == "2026-03-12T09:00:00.000Z"
    assert stated.json()["runId"] != late.json()["runId"]


def test_an_arrival_while_a_run_is_live_is_recorded_skipped(
    server: Server, marker_dir: Path
) -> None:
    set_clock(server, "2026-03-12T10:05:10+00:00")
    with held(marker_dir):  # live until the second arrival was answered, however slow
        running = trigger(server, "minutely")
        assert running.status_code == 202, running.text
        skipped = trigger(server, "minutely", {"X-Voltro-Scheduled-At": "2026-03-12T10:04:00Z"})
    assert skipped.status_code == 200, skipped.text
    assert skipped.json()["status"] == "skipped"
    assert skipped.json()["scheduledAt"] == "2026-03-12T10:04:00.000Z"
    row = get_run(server, skipped.json()["runId"]).json()
    assert (row["status"], row["terminal"]) == ("skipped", True)
    # that occurrence is accounted for: a redelivery is a duplicate of the skipped row
    again = trigger(server, "minutely", {"X-Voltro-Scheduled-At": "2026-03-12T10:04:00Z"})
    assert again.json() == {**skipped.json(), "status": "duplicate"}
    poll_terminal(server, running.json()["runId"])


def test_stated_time_headers(server: Server) -> None:
    set_clock(server, "2026-03-13T09:06:00+00:00")  # arrival alone would be off-cadence
    voltro = trigger(server, "hourly", {"X-Voltro-Scheduled-At": "2026-03-13T09:01:30+00:00"})
    assert voltro.status_code == 202, voltro.text
    assert voltro.json()["scheduledAt"] == "2026-03-13T09:00:00.000Z"
    set_clock(server, "2026-03-13T10:06:00+00:00")
    cloud = trigger(server, "hourly", {"X-CloudScheduler-ScheduleTime": "2026-03-13T10:01:00.52Z"})
    assert cloud.status_code == 202, cloud.text
    assert cloud.json()["scheduledAt"] == "2026-03-13T10:00:00.000Z"
    # both: X-Voltro-Scheduled-At wins (the Cloud Scheduler time alone would be too late)
    both = trigger(
        server,
        "hourly",
        {
            "X-Voltro-Scheduled-At": "2026-03-13T10:02:00Z",
            "X-CloudScheduler-ScheduleTime": "2026-03-13T09:00:00Z",
        },
    )
    assert both.status_code == 200, both.text
    assert both.json()["runId"] == cloud.json()["runId"]
    # an offset other than Z
    berlin = trigger(server, "hourly", {"X-Voltro-Scheduled-At": "2026-03-13T11:03:00+01:00"})
    assert berlin.json()["runId"] == cloud.json()["runId"]
    # a stated time more than the skew before the app's clock: 409 too_late, nothing fired
    late = trigger(server, "hourly", {"X-CloudScheduler-ScheduleTime": "2026-03-13T09:00:00Z"})
    assert late.status_code == 409, late.text
    assert late.json()["code"] == "too_late" and late.json()["skewBudgetMs"] == 300_000


@pytest.mark.parametrize("value", ["yesterday", "2026-03-13T09:00:00", ""])
def test_a_bad_stated_time_is_400(server: Server, value: str) -> None:
    r = trigger(server, "hourly", {"X-Voltro-Scheduled-At": value})
    assert r.status_code == 400, r.text
    assert r.json()["code"] == "invalid_scheduled_at"
    assert r.json()["header"] == "X-Voltro-Scheduled-At"


def test_unknown_schedule_and_unknown_run_are_404(server: Server) -> None:
    r = trigger(server, "noSuchJob")
    assert r.status_code == 404, r.text
    assert r.json()["code"] == "schedule_not_found" and "noSuchJob" in r.json()["detail"]
    r = get_run(server, "sr_00000000000000000000000000000000")
    assert r.status_code == 404, r.text
    assert r.json()["code"] == "run_not_found"


def test_a_self_schedule_is_not_externally_triggered(server: Server, db_url: str) -> None:
    set_clock(server, "2026-03-14T03:00:10+00:00")
    r = trigger(server, "selfJob")
    assert r.status_code == 409, r.text
    assert r.json()["code"] == "not_external"
    assert "not externally triggered" in r.json()["detail"]
    assert not [x for x in fetch_runs(db_url, "selfJob") if x.trigger is Trigger.EXTERNAL]


# --------------------------------------------------------------------------- credentials


def test_bearer_matrix_with_both_tokens_set(server: Server) -> None:
    route = f"{server.url}/_voltro/schedules/hourly/trigger"
    runs = f"{server.url}/_voltro/schedules/runs/sr_00000000000000000000000000000000"
    probe = f"{server.url}/_test/inspect-probe"
    inspect = f"{server.url}/_voltro/inspect/schedules"
    bad: list[dict[str, str]] = [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Bearer {TRIGGER_TOKEN}x"},
        {"Authorization": f"Basic {TRIGGER_TOKEN}"},
        {"Authorization": TRIGGER_TOKEN},
    ]
    for headers in bad:
        for r in (httpx.post(route, headers=headers), httpx.get(runs, headers=headers)):
            assert r.status_code == 401, (headers, r.text)
            assert r.headers["www-authenticate"] == "Bearer"
            assert r.json()["code"] == "unauthorized"
    # the inspect token never opens trigger routes …
    assert httpx.post(route, headers=INSPECT_AUTH).status_code == 401
    assert httpx.get(runs, headers=INSPECT_AUTH).status_code == 401
    # … and the trigger token never opens inspect routes
    r = httpx.get(probe, headers=TRIGGER_AUTH)
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert httpx.get(probe).status_code == 401
    assert httpx.get(probe, headers=INSPECT_AUTH).json() == {"ok": True}
    r = httpx.get(inspect, headers=TRIGGER_AUTH)
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert httpx.get(inspect, headers=INSPECT_AUTH).status_code == 200
    assert httpx.get(runs, headers=TRIGGER_AUTH).status_code == 404  # past auth
    assert TRIGGER_TOKEN not in server.log() and INSPECT_TOKEN not in server.log()


@pytest.mark.parametrize(
    ("set_vars", "dev"),
    [
        ((), False),
        (("VOLTRO_SCHEDULE_TRIGGER_TOKEN",), False),
        (("VOLTRO_INSPECT_TOKEN",), True),
    ],
    ids=["none-set", "trigger-only", "inspect-only-dev"],
)
def test_an_unset_token_shuts_its_routes_with_503(
    tmp_path: Path, set_vars: tuple[str, ...], dev: bool
) -> None:
    env = base_env(f"sqlite+aiosqlite:///{tmp_path / 'v.db'}", tmp_path)
    for var in ("VOLTRO_SCHEDULE_TRIGGER_TOKEN", "VOLTRO_INSPECT_TOKEN"):
        if var not in set_vars:
            env[var] = ""
    env["VOLTRO_DEV"] = "1" if dev else ""
    env["EXT_CLOCK_START"] = "2026-03-02T09:00:05+00:00"
    with uvicorn_server(APP, tmp_path, env, name="tokens") as s:
        route = f"{s.url}/_voltro/schedules/hourly/trigger"
        probe = f"{s.url}/_test/inspect-probe"
        trigger_answers = [httpx.post(route, headers=h) for h in ({}, TRIGGER_AUTH, INSPECT_AUTH)]
        inspect_answers = [httpx.get(probe, headers=h) for h in ({}, INSPECT_AUTH, TRIGGER_AUTH)]
        log = s.log()
    if "VOLTRO_SCHEDULE_TRIGGER_TOKEN" in set_vars:
        assert [r.status_code for r in trigger_answers] == [401, 202, 401]
    else:
        for r in trigger_answers:  # whatever is presented
            assert r.status_code == 503, r.text
            assert r.json()["code"] == "token_not_configured"
            assert r.json()["variable"] == "VOLTRO_SCHEDULE_TRIGGER_TOKEN"
            assert "VOLTRO_SCHEDULE_TRIGGER_TOKEN" in r.json()["detail"]
            assert ("voltro dev" in r.json()["detail"]) is True
    if "VOLTRO_INSPECT_TOKEN" in set_vars:
        assert [r.status_code for r in inspect_answers] == [401, 200, 401]
    else:
        for r in inspect_answers:
            assert r.status_code == 503, r.text
            assert r.json()["variable"] == "VOLTRO_INSPECT_TOKEN"
    if dev:
        assert "VOLTRO_DEV=1" in trigger_answers[0].json()["detail"]
    assert TRIGGER_TOKEN not in log and INSPECT_TOKEN not in log


def test_openapi_names_both_security_schemes(server: Server) -> None:
    schema = httpx.get(f"{server.url}/openapi.json").json()
    schemes = schema["components"]["securitySchemes"]
    assert schemes["VoltroTriggerToken"]["type"] == "http"
    assert schemes["VoltroTriggerToken"]["scheme"] == "bearer"
    assert schemes["VoltroInspectToken"]["scheme"] == "bearer"
    post = schema["paths"]["/_voltro/schedules/{name}/trigger"]["post"]
    get = schema["paths"]["/_voltro/schedules/runs/{run_id}"]["get"]
    assert post["security"] == [{"VoltroTriggerToken": []}]
    assert get["security"] == [{"VoltroTriggerToken": []}]
    headers = {p["name"] for p in post["parameters"] if p["in"] == "header"}
    assert headers == {"X-Voltro-Scheduled-At", "X-CloudScheduler-ScheduleTime"}
    assert {"202", "200", "401", "404", "409", "503"} <= set(post["responses"])
    probe = schema["paths"]["/_test/inspect-probe"]["get"]
    assert probe["security"] == [{"VoltroInspectToken": []}]


# --------------------------------------------------------------------------- the CronJob script


def cronjob_script() -> str:
    text = (REPO / "docs" / "external-trigger.md").read_text()
    match = re.search(r"<!-- cronjob-script -->\n```sh\n(.*?)```", text, re.S)
    assert match, "docs/external-trigger.md lost its cronjob script"
    return match.group(1)


def run_script(server: Server, schedule: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "VOLTRO_TRIGGER_URL": f"{server.url}/_voltro/schedules/{schedule}/trigger",
        "VOLTRO_RUNS_URL": f"{server.url}/_voltro/schedules/runs",
        "VOLTRO_SCHEDULE_TRIGGER_TOKEN": TRIGGER_TOKEN,
        "VOLTRO_POLL_SECONDS": "0.1",
    }
    return subprocess.run(
        ["/bin/sh", "-c", cronjob_script()],
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG,
        check=False,
    )


def test_the_documented_cronjob_script_exits_with_the_runs_outcome(server: Server) -> None:
    assert Path("/usr/bin/curl").exists()
    set_clock(server, "2026-03-16T09:00:20+00:00")
    ok = run_script(server, "hourly")
    assert ok.returncode == 0, (ok.stdout, ok.stderr)
    assert '"status":"succeeded"' in ok.stdout
    # a redelivery of the same firing follows the same run and exits the same way
    again = run_script(server, "hourly")
    assert again.returncode == 0, (again.stdout, again.stderr)
    assert ok.stdout == again.stdout

    set_clock(server, "2026-03-16T09:30:40+00:00")
    failed = run_script(server, "failing")
    assert failed.returncode == 1, (failed.stdout, failed.stderr)
    assert '"status":"failed"' in failed.stdout

    set_clock(server, "2026-03-16T09:45:00+00:00")
    refused = run_script(server, "hourly")
    assert refused.returncode == 1
    assert "off_cadence" in refused.stderr

    # paused by an operator: the Job succeeds without a run to follow
    inspect = f"{server.url}/_voltro/inspect/schedules/minutely"
    assert httpx.post(f"{inspect}/pause", headers=INSPECT_AUTH).status_code == 200
    try:
        paused = run_script(server, "minutely")
        assert paused.returncode == 0, (paused.stdout, paused.stderr)
        assert "paused by an operator" in paused.stdout
    finally:
        assert httpx.post(f"{inspect}/resume", headers=INSPECT_AUTH).status_code == 200
