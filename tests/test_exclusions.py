"""Exclusions (issue 36): ``define_schedule(..., exclude=...)`` and run-time schedules'
``exclude`` — listed days and holiday calendars. An excluded slot is recorded ``skipped`` with
its reason (``error_tag="excluded"``), never run and never owed as ``missed``; the audit stays
clean; the exclusion is part of the definition version.

The done-when: a German public holiday in 2026 is skipped with a row and the next working day
fires — on the injected clock, through the real engine, on every store, ending with
``voltro schedule audit`` exiting 0.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import holidays
import pytest
from support.cluster import audit_database_cli
from support.running import runs_of, served
from support.waiting import wait_until

from fastapi_voltro_schedules import (
    RunStatus,
    Schedule,
    ScheduleContext,
    ScheduleDefinitionError,
    Scheduling,
    SchedulingConfig,
    define_handler,
    define_schedule,
)
from fastapi_voltro_schedules.audit import audit_ledger
from fastapi_voltro_schedules.backfill import plan_range
from fastapi_voltro_schedules.enums import CoordinationOutcome
from fastapi_voltro_schedules.errors import InvalidScheduleError
from fastapi_voltro_schedules.exclusions import ExcludeError, parse_exclude
from fastapi_voltro_schedules.fire_requests import FireRequest, Why
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.planning import SlotAction
from fastapi_voltro_schedules.testing import ManualClock

BERLIN = ZoneInfo("Europe/Berlin")
TOKEN = "inspect-secret-for-exclusion-tests"


def berlin(month: int, day: int, hour: int = 9, minute: int = 0, second: int = 0) -> datetime:
    return datetime(2026, month, day, hour, minute, second, tzinfo=BERLIN).astimezone(UTC)


async def _noop(ctx: ScheduleContext) -> None:
    pass


# ----------------------------------------------------------------------------- reading it


def test_what_exclude_takes() -> None:
    e = parse_exclude(
        [date(2026, 12, 24), "2026-12-31", {"country": "DE", "subdiv": "BY", "language": "de"}]
    )
    assert e is not None
    assert e.reason(date(2026, 12, 24)) == "excluded: 2026-12-24 is listed"
    assert e.reason(date(2026, 12, 31)) == "excluded: 2026-12-31 is listed"
    assert e.reason(date(2026, 1, 6)) == "holiday: Heilige Drei Könige"  # Bavaria only
    assert e.reason(date(2026, 10, 3)) == "holiday: Tag der Deutschen Einheit"
    assert e.reason(date(2026, 10, 5)) is None
    # canonical: the same exclusions in any order are one definition
    again = parse_exclude(
        [{"language": "de", "subdiv": "BY", "country": "DE"}, "2026-12-31", date(2026, 12, 24)]
    )
    assert again is not None and again.to_json() == e.to_json()
    assert json.loads(e.to_json()) == [
        "2026-12-24",
        "2026-12-31",
        {"country": "DE", "language": "de", "subdiv": "BY"},
    ]
    assert parse_exclude(None) is None and parse_exclude([]) is None


def test_a_holidays_calendar_object_is_kept_as_its_spec() -> None:
    e = parse_exclude(holidays.country_holidays("DE", subdiv="BE"))
    assert e is not None and e.storable
    assert e.wire() == [{"country": "DE", "subdiv": "BE"}]
    assert e.reason(date(2026, 3, 8)) == "holiday: Women's Day"  # Berlin only


def test_any_object_with_contains_is_a_calendar() -> None:
    class QuarterEnds:
        def __contains__(self, day: object) -> bool:
            return isinstance(day, date) and (day.month, day.day) in {(3, 31), (6, 30)}

    e = parse_exclude(QuarterEnds())
    assert e is not None and not e.storable
    assert e.reason(date(2026, 3, 31)) == (
        "excluded: 2026-03-31 is in "
        "test_exclusions.test_any_object_with_contains_is_a_calendar.<locals>.QuarterEnds"
    )
    assert e.reason(date(2026, 4, 1)) is None


@pytest.mark.parametrize(
    ("value", "path", "why"),
    [
        ("2026-13-01", "exclude", "is not an ISO date — write YYYY-MM-DD"),
        (["2026-12-24", 42], "exclude[1]", "int '42' is not a day or a calendar"),
        (datetime(2026, 12, 24, 9, tzinfo=UTC), "exclude", "is a datetime — exclude takes days"),
        ([{"country": "XX"}], "exclude[0]", "Country XX not available"),
        ([{"country": "DE", "subdiv": "ZZ"}], "exclude[0]", "does not have subdivision ZZ"),
        ([{"country": "DE", "region": "BY"}], "exclude[0].region", "is not a holidays field"),
        ([{"subdiv": "BY"}], "exclude[0].country", "is required"),
        ([{"country": "DE", "language": None}], "exclude[0].language", "is not a non-empty"),
    ],
)
def test_a_bad_exclude_names_the_item_and_the_fix(value: object, path: str, why: str) -> None:
    with pytest.raises(ExcludeError) as info:
        parse_exclude(value)
    assert info.value.path == path
    assert why in str(info.value)


def test_define_schedule_refuses_eagerly_naming_the_schedule() -> None:
    with pytest.raises(ScheduleDefinitionError) as info:
        define_schedule(
            name="payroll", cron="0 9 * * *", timezone="UTC", handler=_noop, exclude=["24.12."]
        )
    assert str(info.value).startswith('define_schedule("payroll"): exclude[0] — ')


def test_the_slot_day_is_its_date_in_the_schedules_zone() -> None:
    late = define_schedule(
        name="late", cron="30 23 * * *", timezone="Europe/Berlin", handler=_noop,
        exclude=["2026-10-03"],
    )  # fmt: skip
    slot = berlin(10, 3, 23, 30)  # 21:30 UTC on 3 October
    assert late.excluded(slot) == "excluded: 2026-10-03 is listed"
    assert late.excluded(berlin(10, 2, 23, 30)) is None
    # the cadence is unchanged: the excluded slot is still an occurrence
    assert late.next_occurrence(slot - timedelta(seconds=1)) == slot


def test_a_run_time_schedule_takes_data_only() -> None:
    class Mine:
        def __contains__(self, day: object) -> bool:
            return False

    from fastapi_voltro_schedules.handlers import NamedHandler
    from fastapi_voltro_schedules.runtime_schedules import build_runtime_schedule

    handlers = {"h": NamedHandler(name="h", fn=_noop)}
    with pytest.raises(InvalidScheduleError) as info:
        build_runtime_schedule("r", cron="0 9 * * *", timezone="UTC", handler="h",
                               handlers=handlers, exclude=Mine())  # fmt: skip
    assert info.value.field == "exclude" and "not a calendar object of your own" in str(info.value)
    with pytest.raises(InvalidScheduleError) as info:
        build_runtime_schedule("r", cron="0 9 * * *", timezone="UTC", handler="h",
                               handlers=handlers, exclude=["2026-02-30"])  # fmt: skip
    assert info.value.field == "exclude[0]"


# ------------------------------------------------------------------- the life of a holiday


def weekday_report(**kwargs: Any) -> tuple[Schedule, list[datetime]]:
    ran: list[datetime] = []

    async def handler(ctx: ScheduleContext) -> None:
        ran.append(ctx.scheduled_at)

    schedule = define_schedule(
        name="weekdayReport", cron="0 9 * * 1-5", timezone="Europe/Berlin", handler=handler,
        exclude=holidays.country_holidays("DE", language="de"), **kwargs,
    )  # fmt: skip
    return schedule, ran


@asynccontextmanager
async def booted(
    schedules: list[Schedule], url: str, clock: ManualClock, **config: Any
) -> AsyncIterator[Scheduling]:
    cfg = SchedulingConfig(database_url=url, replica_id="replica-a", **config)
    scheduling = Scheduling(schedules, config=cfg, clock=clock)
    async with scheduling.run():
        yield scheduling


async def _rows(s: Scheduling, name: str, count: int) -> list[Any]:
    async def look() -> list[Any] | None:
        rows = await runs_of(s, name)
        done = len(rows) == count and all(r.status.terminal for r in rows)
        return rows if done else None

    found: list[Any] = await wait_until(look, what=f"{count} terminal rows of {name}")
    return found


async def test_easter_2026_is_skipped_with_rows_and_the_next_working_day_fires(
    database_url: str,
) -> None:
    """Good Friday (3 April) and Easter Monday (6 April) are German public holidays in 2026:
    a weekday 09:00 Berlin job skips both with a row each and fires on Tuesday the 7th."""
    await upgrade_to_head(database_url)
    schedule, ran = weekday_report()
    start = berlin(4, 2, 8, 59, 30)
    clock = ManualClock(start)
    async with booted([schedule], database_url, clock) as s:
        await clock.advance(30)  # Thursday 2 April 09:00: a working day
        await _rows(s, "weekdayReport", 1)
        await clock.advance(24 * 3600)  # Good Friday 09:00
        await _rows(s, "weekdayReport", 2)
        await clock.advance(3 * 24 * 3600)  # Easter Monday 09:00 (the weekend has no slot)
        await _rows(s, "weekdayReport", 3)
        await clock.advance(24 * 3600)  # Tuesday 7 April 09:00: the next working day
        rows = await _rows(s, "weekdayReport", 4)
        store = s.store
        assert store is not None
        report = await audit_ledger(
            store, [schedule], start, berlin(4, 7, 10), now=berlin(4, 7, 12)
        )
    assert [(r.scheduled_at, r.status, r.error_tag, r.error_message) for r in rows] == [
        (berlin(4, 2), RunStatus.SUCCEEDED, None, None),
        (berlin(4, 3), RunStatus.SKIPPED, "excluded", "holiday: Karfreitag"),
        (berlin(4, 6), RunStatus.SKIPPED, "excluded", "holiday: Ostermontag"),
        (berlin(4, 7), RunStatus.SUCCEEDED, None, None),
    ]
    assert ran == [berlin(4, 2), berlin(4, 7)]  # the handler never saw a holiday
    assert report.clean and report.excluded == 2 and report.gap_checked == ("weekdayReport",)
    done = audit_database_cli(database_url, start, berlin(4, 8))
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert json.loads(done.stdout)["excluded"] == 2


async def test_a_holiday_written_off_while_behind_is_skipped_not_missed(sqlite_url: str) -> None:
    """The timer falls behind across two holidays at once (a suspended host): the newest is
    decided by the door, the older one written off — both ``skipped``, neither ``missed``."""
    schedule, ran = weekday_report()
    clock = ManualClock(berlin(4, 2, 9, 0, 30))
    async with booted([schedule], sqlite_url, clock) as s:
        await clock.advance(4 * 24 * 3600)  # Thursday 09:00:30 → Monday 09:00:30 in one step
        rows = await _rows(s, "weekdayReport", 2)
    assert [(r.scheduled_at, r.status, r.error_message) for r in rows] == [
        (berlin(4, 3), RunStatus.SKIPPED, "holiday: Karfreitag"),
        (berlin(4, 6), RunStatus.SKIPPED, "holiday: Ostermontag"),
    ]
    assert ran == []


async def test_a_boot_catch_up_skips_the_holiday_it_owes(sqlite_url: str) -> None:
    """Down over Easter with ``backfill="all"``: the boot's catch-up runs the owed working day
    and records the holidays skipped."""
    schedule, ran = weekday_report(backfill="all")
    clock = ManualClock(berlin(4, 2, 9, 0, 30))
    async with booted([schedule], sqlite_url, clock) as s:
        await clock.advance(0)
    clock = ManualClock(berlin(4, 7, 9, 30))  # back up on Tuesday at 09:30
    async with booted([schedule], sqlite_url, clock) as s:
        rows = await _rows(s, "weekdayReport", 3)
    assert [(r.scheduled_at, r.status, r.error_tag) for r in rows] == [
        (berlin(4, 3), RunStatus.SKIPPED, "excluded"),
        (berlin(4, 6), RunStatus.SKIPPED, "excluded"),
        (berlin(4, 7), RunStatus.SUCCEEDED, None),
    ]
    assert ran == [berlin(4, 7)]


async def test_an_external_arrival_on_a_holiday_is_skipped_with_the_same_row(
    sqlite_url: str,
) -> None:
    """A platform that triggers on the holiday (its cron has no calendar) goes through the
    same door as the trigger route: the slot is claimed and recorded skipped, not run; a
    repeat arrival is then the slot's duplicate."""
    ran: list[datetime] = []

    async def handler(ctx: ScheduleContext) -> None:
        ran.append(ctx.scheduled_at)

    schedule = define_schedule(
        name="platformJob", cron="0 9 * * *", timezone="Europe/Berlin", handler=handler,
        trigger="external", exclude=[{"country": "DE"}],
    )  # fmt: skip
    clock = ManualClock(berlin(10, 3, 9, 0, 5))
    async with booted([schedule], sqlite_url, clock) as s:
        engine = s.engine
        assert engine is not None
        firing = await engine.fire(FireRequest(schedule, berlin(10, 3), Why.ARRIVAL))
        assert firing.admission.run is not None
        row = firing.admission.run
        again = await engine.fire(FireRequest(schedule, berlin(10, 3), Why.ARRIVAL))
        rows = await runs_of(s, "platformJob")
    assert (row.status, row.error_tag, row.error_message) == (
        RunStatus.SKIPPED, "excluded", "holiday: German Unity Day",
    )  # fmt: skip
    assert again.admission.run is None  # lost the claim: one row for the slot
    assert [r.id for r in rows] == [row.id] and ran == []


async def test_a_backfill_never_runs_an_excluded_slot(sqlite_url: str) -> None:
    schedule, _ = weekday_report()
    await upgrade_to_head(sqlite_url)
    from fastapi_voltro_schedules.store import create_store

    store = create_store(sqlite_url)
    try:
        plan = await plan_range(
            store, schedule, berlin(4, 1, 12), berlin(4, 8, 12), reprocess="all", dry_run=True,
        )  # fmt: skip
    finally:
        await store.dispose()
    assert [(state.slot, state.action) for state in plan.states] == [
        (berlin(4, 2), SlotAction.RUN),
        (berlin(4, 3), SlotAction.EXCLUDED),
        (berlin(4, 6), SlotAction.EXCLUDED),
        (berlin(4, 7), SlotAction.RUN),
        (berlin(4, 8), SlotAction.RUN),
    ]
    assert plan.to_run == 3


# ------------------------------------------------------------------ run-time schedules


@define_handler(name="tenantPayroll")
async def tenant_payroll(ctx: ScheduleContext) -> None:
    pass


async def test_a_run_time_exclusion_over_http_is_validated_versioned_and_audited(
    database_url: str,
) -> None:
    """``PUT`` with ``exclude``: refused at the door naming the item; stored with the version
    (a changed exclusion is a new version, the same one is not); Whit Monday in Bavaria is
    skipped with a row; the operator's audit, from the database alone, exits 0."""
    await upgrade_to_head(database_url)
    start = berlin(5, 22, 8, 59, 30)  # Friday before Whit Monday (25 May 2026)
    clock = ManualClock(start)
    cfg = SchedulingConfig(database_url=database_url, replica_id="replica-a", inspect_token=TOKEN)
    s = Scheduling([], config=cfg, clock=clock, handlers=[tenant_payroll])
    auth = {"Authorization": f"Bearer {TOKEN}"}
    url = "/_voltro/inspect/schedules/payroll.acme"
    body: dict[str, Any] = {
        "cron": "0 9 * * 1-5", "timezone": "Europe/Berlin", "handler": "tenantPayroll",
        "exclude": [{"country": "DE", "subdiv": "XX"}],
    }  # fmt: skip
    async with served(s) as client:
        bad = await client.put(url, json=body, headers=auth)
        assert bad.status_code == 422, bad.text
        assert bad.json()["field"] == "exclude[0]"
        assert "does not have subdivision XX" in bad.json()["detail"]
        bad = await client.put(url, json={**body, "exclude": "2026-05-25"}, headers=auth)
        assert (bad.status_code, bad.json()["field"]) == (422, "exclude"), bad.text
        body["exclude"] = [{"country": "DE", "subdiv": "BY", "language": "de"}]
        created = await client.put(url, json=body, headers=auth)
        assert created.status_code == 201, created.text
        assert created.json()["exclude"] == [{"country": "DE", "language": "de", "subdiv": "BY"}]
        same = await client.put(url, json=body, headers=auth)
        assert same.status_code == 200
        await clock.advance(30)  # Friday 22 May 09:00
        await _rows(s, "payroll.acme", 1)
        await clock.advance(3 * 24 * 3600)  # Whit Monday
        await _rows(s, "payroll.acme", 2)
        await clock.advance(24 * 3600)  # Tuesday
        rows = await _rows(s, "payroll.acme", 3)
        body["exclude"].append("2026-05-27")  # one more day: a new version
        edited = await client.put(url, json=body, headers=auth)
        assert edited.status_code == 200
        view = (await client.get(url, headers=auth)).json()
    assert [(r.scheduled_at, r.status, r.error_message) for r in rows] == [
        (berlin(5, 22), RunStatus.SUCCEEDED, None),
        (berlin(5, 25), RunStatus.SKIPPED, "holiday: Pfingstmontag"),
        (berlin(5, 26), RunStatus.SUCCEEDED, None),
    ]
    assert [v["version"] for v in view["versions"]] == [2, 1]  # the unchanged PUT added none
    assert [v["exclude"] for v in view["versions"]] == [
        ["2026-05-27", {"country": "DE", "language": "de", "subdiv": "BY"}],
        [{"country": "DE", "language": "de", "subdiv": "BY"}],
    ]
    assert view["exclude"] == ["2026-05-27", {"country": "DE", "language": "de", "subdiv": "BY"}]
    done = audit_database_cli(database_url, start, berlin(5, 26, 10))
    assert done.returncode == 0, (done.stdout, done.stderr)
    report = json.loads(done.stdout)
    assert report["gapChecked"] == ["payroll.acme"] and report["excluded"] == 1


# ------------------------------------------------------------------ voltro schedule next


def test_schedule_next_shows_calendar_terms_and_marks_excluded_days(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``voltro schedule put`` (in-process, ``--app``) of a month-end schedule with days off,
    then ``voltro schedule next``: the ``L`` occurrences, the excluded one marked; a bad
    holidays spec or calendar term is refused naming the field (exit 2)."""
    from typer.testing import CliRunner

    from fastapi_voltro_schedules.cli import app as cli_app
    from fastapi_voltro_schedules.cron import CronSpec

    for key, value in {
        "VOLTRO_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'voltro.db'}",
        "VOLTRO_INSPECT_TOKEN": "operator-token-for-cli-tests",
        "VOLTRO_DEV": "",
    }.items():
        monkeypatch.setenv(key, value)
    sys.modules.pop("apps.operate_app", None)  # re-read the config from this test's env
    spec = CronSpec.parse("0 9 L * *", "Europe/Berlin")
    first = spec.next_occurrence(datetime.now(UTC) + timedelta(minutes=5))
    day_off = first.astimezone(BERLIN).date().isoformat()

    def voltro(*args: str) -> tuple[int, str, str]:
        done = CliRunner().invoke(cli_app, ["schedule", *args, "--app", "apps.operate_app:app"])
        return done.exit_code, done.stdout, done.stderr

    try:
        code, out, err = voltro(
            "put", "monthEnd", "--cron", "0 9 L * *", "--timezone", "Europe/Berlin",
            "--handler", "tenantReport", "--holidays", "DE", "--exclude", day_off,
        )  # fmt: skip
        assert code == 0, (out, err)
        code, out, err = voltro("next", "monthEnd", "--count", "3", "--json")
        assert code == 0, (out, err)
        rows = json.loads(out)["occurrences"]
        assert [r["utc"][:10] for r in rows] == [
            o.date().isoformat() for o in spec.occurrences(first - timedelta(seconds=1),
                                                           first + timedelta(days=95), 3)
        ]  # fmt: skip
        assert rows[0]["excluded"] == f"excluded: {day_off} is listed"
        assert all(datetime.fromisoformat(r["local"]).day >= 28 for r in rows)  # month ends
        code, out, err = voltro("next", "monthEnd", "--count", "1")
        assert code == 0 and f"skipped — excluded: {day_off} is listed" in out, out
        code, out, err = voltro(
            "put", "bad", "--cron", "0 9 L * *", "--timezone", "Europe/Berlin",
            "--handler", "tenantReport", "--holidays", "DE:ZZ",
        )  # fmt: skip
        assert code == 2 and "exclude[0]" in err and "subdivision ZZ" in err, err
        code, out, err = voltro(
            "put", "bad", "--cron", "0 9 32W * *", "--timezone", "Europe/Berlin",
            "--handler", "tenantReport",
        )  # fmt: skip
        assert code == 2 and 'day-of-month field "32W" — day 32 is out of range' in err, err
    finally:
        sys.modules.pop("apps.operate_app", None)


@pytest.mark.postgres
async def test_a_cluster_owner_writes_off_a_holiday_skipped_through_its_fence(
    postgres_url: str,
) -> None:
    """``coordination="cluster"``: the schedule's owner records the written-off slots through
    its lease fence — the holiday among them ``skipped``, not ``missed``."""
    await upgrade_to_head(postgres_url)
    schedule, ran = weekday_report()
    clock = ManualClock(berlin(4, 2, 9, 0, 30))
    async with booted([schedule], postgres_url, clock, coordination="cluster") as s:
        await clock.advance(4 * 24 * 3600)  # Thursday → Monday in one step: behind by two
        rows = await _rows(s, "weekdayReport", 2)
    assert [(r.scheduled_at, r.status, r.error_tag) for r in rows] == [
        (berlin(4, 3), RunStatus.SKIPPED, "excluded"),
        (berlin(4, 6), RunStatus.SKIPPED, "excluded"),
    ]
    assert {r.coordination_outcome for r in rows} == {CoordinationOutcome.CLUSTER}  # fenced
    assert ran == []


async def test_a_declared_schedules_changed_exclude_is_a_new_version(sqlite_url: str) -> None:
    """Deploys that change ``exclude`` add a version; one that reorders it does not."""
    clock = ManualClock(berlin(4, 2, 12))

    def declared(exclude: object) -> Schedule:
        return define_schedule(
            name="weekdayReport", cron="0 9 * * 1-5", timezone="Europe/Berlin",
            handler=_noop, exclude=exclude,
        )  # fmt: skip

    deploys = [
        None,
        [{"country": "DE"}],
        [{"country": "DE"}, "2026-12-24"],
        ["2026-12-24", holidays.country_holidays("DE")],  # the same days, another order
    ]
    for exclude in deploys:
        async with booted([declared(exclude)], sqlite_url, clock) as s:
            store = s.store
            assert store is not None
            versions = (await store.definitions(["weekdayReport"]))["weekdayReport"]
        await clock.advance(60)
    assert [(v.version, v.exclude) for v in versions] == [
        (3, '["2026-12-24",{"country":"DE"}]'),
        (2, '[{"country":"DE"}]'),
        (1, None),
    ]


async def test_a_cron_monitor_hears_ok_for_an_excluded_day(sqlite_url: str) -> None:
    """A monitor's cron has no calendar: without a check-in it would call the holiday missed.
    The excluded slot checks in ``ok`` (a Healthchecks success ping, no start), and the
    ``on_outcome`` hook sees the skipped row with its reason."""
    from support.fake_monitors import fake_monitor_service

    from fastapi_voltro_schedules import HealthchecksMonitor, RecordedOutcome

    seen: list[RecordedOutcome] = []
    schedule, ran = weekday_report()
    clock = ManualClock(berlin(4, 3, 8, 59, 30))  # Good Friday
    with fake_monitor_service() as service:
        cfg = SchedulingConfig(database_url=sqlite_url, replica_id="solo", shutdown_grace_ms=0)
        s = Scheduling(
            [schedule], config=cfg, clock=clock, on_outcome=seen.append,
            monitors=[HealthchecksMonitor({"weekdayReport": f"{service.url}/ping/holiday"})],
        )  # fmt: skip
        async with s.run():
            await clock.advance(30)
            await _rows(s, "weekdayReport", 1)
            await wait_until(lambda: service.pings(), what="the check-in")
        pings = [p.path for p in service.pings()]
    assert pings == ["/ping/holiday"]  # success, and no /start: nothing started
    assert [(o.status, o.error_tag, o.error_message) for o in seen] == [
        (RunStatus.SKIPPED, "excluded", "holiday: Karfreitag")
    ]
    assert ran == []
