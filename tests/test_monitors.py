"""Cron monitors from the ledger (issue 33): Sentry Crons check-ins and Healthchecks.io-style
pings, sent over real HTTP to a fake service (``support/fake_monitors.py``).

Per slot: one ``in_progress`` and one ``ok``/``error`` (Healthchecks: ``/start``, then the URL
or ``/fail``); per ``missed`` row one missed check-in (``/fail``, Sentry ``error``) — exactly
once across two replicas sharing one Postgres ledger and one manual clock, each sent by the
replica that wrote the row. Sentry's monitor is upserted from the schedule (cron, zone, margin
= the skew budget, max runtime).
"""

from __future__ import annotations

import logging
import subprocess
import sys
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sentry_sdk
from support.fake_monitors import FakeMonitorService, Received, fake_monitor_service
from support.running import runs_of
from support.servers import REPO
from support.waiting import wait_until

from fastapi_voltro_schedules import (
    CheckInStatus,
    ConfigurationError,
    HealthchecksMonitor,
    RecordedOutcome,
    RunStatus,
    Schedule,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    SentryCronsMonitor,
    Trigger,
    define_schedule,
)
from fastapi_voltro_schedules.audit import audit_ledger
from fastapi_voltro_schedules.definition import DEFAULT_MAX_RUNTIME_MS
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.monitors import CheckIn, feed
from fastapi_voltro_schedules.monitors.base import check_in_uuid
from fastapi_voltro_schedules.monitors.sentry import monitor_slug, sentry_crontab
from fastapi_voltro_schedules.store import RunRecord, create_store, new_run_id
from fastapi_voltro_schedules.store.instrumented import InstrumentedStore
from fastapi_voltro_schedules.testing import ManualClock


@pytest.fixture
def service() -> Iterator[FakeMonitorService]:
    with fake_monitor_service() as fake:
        yield fake


@pytest.fixture
def sentry(service: FakeMonitorService) -> Iterator[FakeMonitorService]:
    """sentry-sdk initialised on the fake ingest endpoint (no integrations: nothing else of
    the process is hooked), closed and unset after the test."""
    sentry_sdk.init(
        dsn=service.dsn,
        default_integrations=False,
        auto_enabling_integrations=False,
        environment="test",
    )
    try:
        yield service
    finally:
        sentry_sdk.get_client().close(timeout=5)
        sentry_sdk.get_global_scope().set_client(None)


def rid(run_id: str) -> str:
    return str(uuid.UUID(hex=check_in_uuid(run_id)))


def by_rid(pings: list[Received]) -> dict[str, list[Received]]:
    grouped: dict[str, list[Received]] = defaultdict(list)
    for ping in pings:
        grouped[ping.query["rid"]].append(ping)
    return grouped


def kind(ping: Received) -> str:
    """``start`` / ``success`` / ``fail`` of a ping to ``/ping/<name>[/start|/fail]``."""
    tail = ping.path.rsplit("/", 1)[1]
    return tail if tail in ("start", "fail") else "success"


async def to(clock: ManualClock, instant: datetime) -> None:
    await clock.advance((instant - clock.now()).total_seconds())


# ---------------------------------------------------------------- two replicas, one ledger

T0 = datetime(2026, 6, 1, 10, 0, 5, tzinfo=UTC)
NAMES = ("ok-job", "boom-job")


def at(minute: int) -> datetime:
    return T0.replace(minute=minute, second=0)


async def _ok_job(ctx: ScheduleContext) -> None:
    return None


async def _boom_job(ctx: ScheduleContext) -> None:
    raise RuntimeError("the export broke")


def cluster_schedules() -> list[Schedule]:
    ok = define_schedule(
        name="ok-job",
        cron="* * * * *",
        timezone="Europe/Paris",
        max_runtime_ms=150_000,
        backfill="skip",
    )(_ok_job)
    boom = define_schedule(name="boom-job", cron="* * * * *", timezone="UTC", backfill="skip")(
        _boom_job
    )
    return [ok, boom]


async def seed(url: str) -> RunRecord:
    """``ok-job`` last succeeded at 09:57; ``boom-job``'s 09:58 run is a corpse of a replica
    that died (boot marks it abandoned). Both then owe ``missed`` rows up to 10:00."""
    await upgrade_to_head(url)
    corpse = RunRecord(
        id=new_run_id(),
        name="boom-job",
        scheduled_at=at(0) - timedelta(minutes=2),
        status=RunStatus.RUNNING,
        trigger=Trigger.SELF,
        fired_at=at(0) - timedelta(minutes=2),
        heartbeat_at=at(0) - timedelta(minutes=2),
        replica_id="dead-replica",
    )
    done = RunRecord(
        id=new_run_id(),
        name="ok-job",
        scheduled_at=at(0) - timedelta(minutes=3),
        status=RunStatus.SUCCEEDED,
        trigger=Trigger.SELF,
        fired_at=at(0) - timedelta(minutes=3),
        finished_at=at(0) - timedelta(minutes=3),
        replica_id="old",
    )
    store = create_store(url)
    try:
        await store.insert_runs([corpse, done])
    finally:
        await store.dispose()
    return corpse


@asynccontextmanager
async def replicas(
    url: str, clock: ManualClock, service: FakeMonitorService
) -> AsyncIterator[tuple[Scheduling, Scheduling]]:
    async with AsyncExitStack() as stack:
        pair = []
        for replica in ("pod-a", "pod-b"):
            config = SchedulingConfig(
                database_url=url,
                replica_id=replica,
                coordination="advisoryLock",
                external_trigger_skew_ms=120_000,
                shutdown_grace_ms=0,
            )

            def url_for(name: str, replica: str = replica) -> str | None:
                return f"{service.url}/ping/{name}?replica={replica}" if name in NAMES else None

            monitors = [HealthchecksMonitor(url_for), SentryCronsMonitor()]
            scheduling = Scheduling(
                cluster_schedules(), config=config, clock=clock, monitors=monitors
            )
            pair.append(await stack.enter_async_context(scheduling.run()))
        yield pair[0], pair[1]


@pytest.mark.postgres
async def test_two_replicas_check_each_slot_in_exactly_once(
    postgres_url: str, sentry: FakeMonitorService
) -> None:
    service = sentry
    corpse = await seed(postgres_url)
    clock = ManualClock(T0)
    async with replicas(postgres_url, clock, service) as (a, _b):
        for minute in (1, 2, 3):
            await to(clock, at(minute))

            async def slot_done(minute: int = minute) -> bool:
                rows = [r for n in NAMES for r in await runs_of(a, n)]
                return sum(r.scheduled_at == at(minute) and r.terminal for r in rows) == 2

            await wait_until(slot_done, what=f"10:0{minute} settled")
        rows = [r for n in NAMES for r in await runs_of(a, n)]
    # leaving the block drained both replicas' queues and flushed the SDK's transport

    # the scenario happened: missed slots at boot, a corpse, three slots run per schedule
    table = sorted((r.name, r.scheduled_at.minute, r.status.value, r.error_tag) for r in rows)
    assert table == sorted([
        ("ok-job", 57, "succeeded", None),
        *[("ok-job", m, "missed", None) for m in (58, 59, 0)],
        *[("ok-job", m, "succeeded", None) for m in (1, 2, 3)],
        ("boom-job", 58, "failed", "abandoned"),
        *[("boom-job", m, "missed", None) for m in (59, 0)],
        *[("boom-job", m, "failed", "RuntimeError") for m in (1, 2, 3)],
    ])  # fmt: skip
    checked = [r for r in rows if r.replica_id != "old"]
    ran = [r for r in checked if r.fired_at is not None and r.error_tag != "abandoned"]
    assert {r.replica_id for r in ran} <= {"pod-a", "pod-b"} and len(ran) == 6

    # Healthchecks: exactly the pings each row owes, from the replica that wrote it
    pings = by_rid(service.pings())
    assert set(pings) == {rid(r.id) for r in checked}  # nothing else pinged (not the 09:57 row)
    for row in checked:
        sent = pings[rid(row.id)]
        assert {p.path.split("/")[2] for p in sent} == {row.name}
        if row in ran:
            want = ["start", "success" if row.status is RunStatus.SUCCEEDED else "fail"]
            assert [kind(p) for p in sent] == want, row
            assert {p.query["replica"] for p in sent} == {row.replica_id}
        else:  # missed, or the corpse marked abandoned: one fail, no start
            assert [kind(p) for p in sent] == ["fail"], row
    boom = next(r for r in ran if r.error_tag == "RuntimeError")
    assert b"(RuntimeError): the export broke" in pings[rid(boom.id)][1].body
    corpse_fail = pings[rid(corpse.id)][0]
    assert b"(abandoned)" in corpse_fail.body
    missed_fail = next(pings[rid(r.id)][0] for r in checked if r.status is RunStatus.MISSED)
    assert b"missed" in missed_fail.body

    # Sentry: one in_progress then one ok/error per run (same check_in_id), one error per
    # missed row and for the corpse; every check-in upserts the schedule's monitor
    check_ins = service.check_ins()
    by_id: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for item in check_ins:
        by_id[item["check_in_id"]].append(item)
    assert set(by_id) == {check_in_uuid(r.id) for r in checked}
    for row in checked:
        sent = by_id[check_in_uuid(row.id)]
        assert {c["monitor_slug"] for c in sent} == {row.name}
        if row in ran:
            final = "ok" if row.status is RunStatus.SUCCEEDED else "error"
            assert [c["status"] for c in sent] == ["in_progress", final], row
            assert row.fired_at is not None and row.finished_at is not None
            assert sent[1]["duration"] == (row.finished_at - row.fired_at).total_seconds()
        else:
            assert [c["status"] for c in sent] == ["error"], row
    configs = {c["monitor_slug"]: c["monitor_config"] for c in check_ins if "monitor_config" in c}
    assert len(configs) == 2 and all("monitor_config" in c for c in check_ins)
    assert configs["ok-job"] == {
        "schedule": {"type": "crontab", "value": "* * * * *"},
        "timezone": "Europe/Paris",
        "checkin_margin": 2,  # external_trigger_skew_ms=120_000
        "max_runtime": 3,  # 150 s, in whole minutes up
    }
    assert configs["boom-job"]["timezone"] == "UTC"
    assert configs["boom-job"]["max_runtime"] == DEFAULT_MAX_RUNTIME_MS // 60_000
    assert {c["environment"] for c in check_ins} == {"test"}

    store = create_store(postgres_url)
    try:
        report = await audit_ledger(store, [], at(0) - timedelta(hours=1), at(4), now=at(4))
    finally:
        await store.dispose()
    assert report.clean, report.text()


# ------------------------------------------------------- one replica: retries, hook, limits

T1 = datetime(2026, 6, 1, 11, 59, 30, tzinfo=UTC)
SECRET = "/ping/gone-0a1b2c3d-secret"


async def test_pings_retry_drop_manual_runs_and_log_only_the_host(
    sqlite_url: str,
    service: FakeMonitorService,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(feed, "BACKOFF_S", (0.05, 0.05))
    caplog.set_level(logging.INFO, logger="fastapi_voltro_schedules")

    @define_schedule(name="tick", cron="* * * * *", timezone="UTC")
    async def tick(ctx: ScheduleContext) -> None:
        return None

    @define_schedule(name="gone", cron="* * * * *", timezone="UTC")
    async def gone(ctx: ScheduleContext) -> None:
        return None

    @define_schedule(name="hang", cron="0 12 * * *", timezone="UTC")
    async def hang(ctx: ScheduleContext) -> None:
        await ctx_never_set(ctx)

    seen: list[RecordedOutcome] = []

    def hook(outcome: RecordedOutcome) -> None:
        seen.append(outcome)

    urls = {
        "tick": f"{service.url}/ping/tick",
        "gone": f"{service.url}{SECRET}",
        "hang": f"{service.url}/ping/hang/",
    }
    service.by_path = {SECRET + "/start": 404, SECRET: 404}
    service.answers = [500, 500]  # the first ping (12:00's starts) fails twice
    config = SchedulingConfig(database_url=sqlite_url, replica_id="solo", shutdown_grace_ms=0)
    clock = ManualClock(T1)
    scheduling = Scheduling(
        [tick, gone, hang],
        config=config,
        clock=clock,
        on_outcome=hook,
        monitors=[HealthchecksMonitor(urls)],
    )

    def pinged(name: str, what: str) -> int:
        return sum(p.path.split("/")[2] == name and kind(p) == what for p in service.pings())

    async with scheduling.run():
        await clock.advance(30)  # 12:00
        await wait_until(lambda: pinged("tick", "success") == 1, what="12:00 tick success")
        manual = await scheduling.fire_now("tick")

        async def manual_done() -> bool:
            return any(o.run_id == manual.id for o in seen)

        await wait_until(manual_done, what="the manual run's outcome reached the hook")
        await clock.advance(60)  # 12:01
        await wait_until(lambda: pinged("tick", "success") == 2, what="12:01 tick success")
        gone_pings = lambda: [p for p in service.pings() if p.path.startswith(SECRET)]  # noqa: E731
        await wait_until(lambda: len(gone_pings()) == 4, what="12:01 gone's ping")
        rows = await runs_of(scheduling, "tick")
    # hang was cut by the shutdown: its fail was sent before the scheduler stopped

    tick_pings = by_rid([p for p in service.pings() if p.path.startswith("/ping/tick")])
    slots = {r.scheduled_at: r for r in rows if r.trigger is Trigger.SELF}
    first, second = slots[T1 + timedelta(seconds=30)], slots[T1 + timedelta(seconds=90)]
    # 12:00's start: two 500s then the third attempt took; one of each after that
    assert [kind(p) for p in tick_pings[rid(first.id)]] == ["start"] * 3 + ["success"]
    assert [kind(p) for p in tick_pings[rid(second.id)]] == ["start", "success"]
    assert rid(manual.id) not in tick_pings  # Run now is off the monitored cadence
    assert set(tick_pings) == {rid(first.id), rid(second.id)}

    # a 404 is not retried: each check-in tried once, and the log names the host only
    assert [kind(p) for p in gone_pings()] == ["start", "success"] * 2
    refused = [r for r in caplog.records if "answered 404" in r.getMessage()]
    assert len(refused) == 4
    assert all("healthchecks(127.0.0.1)" in r.getMessage() for r in refused)
    assert "0a1b2c3d" not in caplog.text and SECRET not in caplog.text

    hang_pings = [p for p in service.pings() if p.path.startswith("/ping/hang")]
    assert [(p.path, kind(p)) for p in hang_pings] == [
        ("/ping/hang/start", "start"),
        ("/ping/hang/fail", "fail"),
    ]
    assert b"(shutdown)" in hang_pings[1].body
    assert len({p.query["rid"] for p in hang_pings}) == 1

    # the user's own hook still saw every outcome (the manual run's too)
    assert {o.run_id for o in seen} >= {first.id, second.id, manual.id}


async def ctx_never_set(ctx: ScheduleContext) -> None:
    import anyio

    await anyio.Event().wait()


async def test_a_service_that_is_down_never_holds_up_a_firing(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(feed, "BACKOFF_S", (0.05, 0.05))
    caplog.set_level(logging.INFO, logger="fastapi_voltro_schedules")
    with fake_monitor_service() as closed:
        dead_url = f"{closed.url}/ping/secret-key-123"
    # the port is closed now: every attempt is refused

    @define_schedule(name="tick", cron="* * * * *", timezone="UTC")
    async def tick(ctx: ScheduleContext) -> None:
        return None

    config = SchedulingConfig(database_url=sqlite_url, replica_id="solo")
    clock = ManualClock(T1)
    monitor = HealthchecksMonitor({"tick": dead_url})
    scheduling = Scheduling([tick], config=config, clock=clock, monitors=[monitor])
    async with scheduling.run():
        for minute in range(3):
            await clock.advance(30 if minute == 0 else 60)

            async def ran(n: int = minute + 1) -> bool:
                rows = await runs_of(scheduling, "tick")
                return sum(r.status is RunStatus.SUCCEEDED for r in rows) == n

            await wait_until(ran, what=f"{minute + 1} runs succeeded")
        unsent = lambda: [  # noqa: E731
            r for r in caplog.records if "check-in not sent after 3 attempts" in r.getMessage()
        ]
        await wait_until(lambda: len(unsent()) == 6, what="6 check-ins given up")
    assert all("unreachable (ConnectError)" in r.getMessage() for r in unsent())
    assert "secret-key-123" not in caplog.text


async def test_without_a_monitor_the_store_seam_has_no_started_callback(sqlite_url: str) -> None:
    config = SchedulingConfig(database_url=sqlite_url, replica_id="solo")
    async with Scheduling([], config=config, clock=ManualClock(T1)).run() as scheduling:
        assert isinstance(scheduling.store, InstrumentedStore)
        assert scheduling.store.on_started is None  # the herd pays one `is None` a write
        assert scheduling.store.on_recorded is None


# ------------------------------------------------------------------------- pure pieces


@pytest.mark.parametrize(
    ("cron", "crontab"),
    [
        ("*/5 * * * *", "*/5 * * * *"),
        ("0 9 * * MON-FRI", "0 9 * * MON-FRI"),
        ("@hourly", "0 * * * *"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@weekly", "0 0 * * 0"),
        ("@monthly", "0 0 1 * *"),
        ("@yearly", "0 0 1 1 *"),
        ("30 0 3 * * *", "0 3 * * *"),  # one second a minute: Sentry counts minutes
        ("*/10 * * * * *", None),  # several a minute: no crontab
        ("0,30 * * * * *", None),
    ],
)
def test_the_cron_sentry_is_given(cron: str, crontab: str | None) -> None:
    assert sentry_crontab(cron) == crontab


@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("nightly-export", "nightly-export"),
        ("report.acme", "report-acme"),
        ("Billing Run", "billing-run"),
        ("x" * 80, "x" * 50),
        ("...", "schedule"),
    ],
)
def test_monitor_slugs(name: str, slug: str) -> None:
    assert monitor_slug(name) == slug


def test_check_in_ids_are_the_run_ids_uuid() -> None:
    run_id = new_run_id()
    assert check_in_uuid(run_id) == run_id.removeprefix("sr_")
    assert check_in_uuid("legacy-id") == check_in_uuid("legacy-id")  # stable across replicas
    uuid.UUID(hex=check_in_uuid("legacy-id"))


def test_ping_urls_keep_the_query_and_add_the_run() -> None:
    monitor = HealthchecksMonitor({"a": "https://hc.example/ping/key/a-slug?create=1"})
    check_in = CheckIn(
        name="a",
        run_id="sr_" + "0" * 31 + "1",
        status=CheckInStatus.IN_PROGRESS,
        trigger=Trigger.SELF,
        scheduled_at=T1,
        fired_at=T1,
        finished_at=None,
        schedule=None,
        margin=timedelta(minutes=5),
    )
    rid_ = "00000000-0000-0000-0000-000000000001"
    assert monitor.ping_url(check_in) == (
        f"https://hc.example/ping/key/a-slug/start?create=1&rid={rid_}"
    )
    fail = CheckIn(**{**_fields(check_in), "status": CheckInStatus.MISSED})
    assert monitor.ping_url(fail) == f"https://hc.example/ping/key/a-slug/fail?create=1&rid={rid_}"
    ok = CheckIn(**{**_fields(check_in), "status": CheckInStatus.OK})
    assert monitor.ping_url(ok) == f"https://hc.example/ping/key/a-slug?create=1&rid={rid_}"
    assert monitor.label == "healthchecks(hc.example)"
    assert not monitor.watches("b")


def _fields(check_in: CheckIn) -> dict[str, Any]:
    return {name: getattr(check_in, name) for name in CheckIn.__dataclass_fields__}


def test_bad_monitor_arguments_are_refused_naming_the_fix() -> None:
    with pytest.raises(ConfigurationError, match=r"ping URL of schedule nightly is not") as info:
        HealthchecksMonitor({"nightly": "hc-ping.com/secret-uuid"})
    assert "secret-uuid" not in str(info.value)  # a ping URL is a secret
    with pytest.raises(ConfigurationError, match=r"url_for=.*got int"):
        HealthchecksMonitor(42)  # type: ignore[arg-type]
    monitor = HealthchecksMonitor({})
    with pytest.raises(ConfigurationError, match=r"write monitors=\[monitor\]"):
        Scheduling([], monitors=monitor)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"must hold monitors .* got str"):
        Scheduling([], monitors=["https://hc-ping.com/x"])  # type: ignore[list-item]


def test_the_package_imports_without_sentry_sdk_and_names_the_extra() -> None:
    script = (
        "import sys; sys.modules['sentry_sdk'] = None\n"
        "import fastapi_voltro_schedules as v\n"
        "v.HealthchecksMonitor({})\n"
        "try:\n"
        "    v.SentryCronsMonitor()\n"
        "except v.ConfigurationError as exc:\n"
        "    print(exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "pip install 'fastapi-voltro-schedules[sentry]'" in result.stdout


def _check_in(schedule: Schedule | None, status: CheckInStatus) -> CheckIn:
    return CheckIn(
        name="fine" if schedule is None else schedule.name,
        run_id=new_run_id(),
        status=status,
        trigger=Trigger.SELF,
        scheduled_at=T1,
        fired_at=T1,
        finished_at=None,
        schedule=schedule,
        margin=timedelta(seconds=30),
    )


async def test_a_sub_minute_cron_is_sent_without_a_config_and_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    @define_schedule(name="fine", cron="*/10 * * * * *", timezone="UTC")
    async def fine(ctx: ScheduleContext) -> None:
        return None

    @define_schedule(name="daily", cron="@daily", timezone="Asia/Tokyo", max_runtime_ms=1)
    async def daily(ctx: ScheduleContext) -> None:
        return None

    monitor = SentryCronsMonitor()
    caplog.set_level(logging.INFO, logger="fastapi_voltro_schedules")
    for _ in range(2):
        assert monitor.config_for(_check_in(fine, CheckInStatus.OK)) is None
    said = [r for r in caplog.records if "fires more than once a minute" in r.getMessage()]
    assert len(said) == 1 and "create its monitor in Sentry by hand" in said[0].getMessage()
    assert monitor.config_for(_check_in(daily, CheckInStatus.IN_PROGRESS)) == {
        "schedule": {"type": "crontab", "value": "0 0 * * *"},
        "timezone": "Asia/Tokyo",
        "checkin_margin": 1,  # 30 s: at least one minute
        "max_runtime": 1,
    }
    assert SentryCronsMonitor(upsert=False).config_for(_check_in(daily, CheckInStatus.OK)) is None
    picked = SentryCronsMonitor({"daily": "tokyo-daily"})
    assert picked.watches("daily") and not picked.watches("fine")


async def test_an_uninitialised_sdk_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    assert not sentry_sdk.get_client().is_active()  # no test left a client behind
    caplog.set_level(logging.INFO, logger="fastapi_voltro_schedules")
    monitor = SentryCronsMonitor()
    for _ in range(3):
        await monitor.send(_check_in(None, CheckInStatus.OK))
    said = [r for r in caplog.records if "sentry_sdk.init(dsn=...)" in r.getMessage()]
    assert len(said) == 1
