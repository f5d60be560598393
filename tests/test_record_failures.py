"""``record="failures"`` (issue 35): a ledger that stays small where the user wants it.

A success of such a schedule's clock-driven run is counted in its slot's hour
(``_voltro_schedule_rollups``) once a newer success replaces it; the schedule's newest success
stays a row (what catch-up, a takeover and the missed watcher read as "the last slot that
ran"). Failures, skips, misses and manual runs keep their rows; claims elect every slot as
before. On every store.
"""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
from conftest import SERVERS
from prometheus_client import CollectorRegistry
from sqlalchemy import func, select
from support.cluster import audit_database_cli
from support.running import served
from support.waiting import wait_until

from fastapi_voltro_schedules import (
    Schedule,
    ScheduleContext,
    ScheduleDefinitionError,
    Scheduling,
    SchedulingConfig,
    define_handler,
    define_schedule,
)
from fastapi_voltro_schedules.api.trigger import arrive
from fastapi_voltro_schedules.arrivals import DUPLICATE_WAIT_SECONDS
from fastapi_voltro_schedules.audit import audit_ledger
from fastapi_voltro_schedules.enums import CoordinationOutcome, RunStatus, Trigger
from fastapi_voltro_schedules.errors import InvalidScheduleError
from fastapi_voltro_schedules.metrics import SchedulerMetrics
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.models import claim_key, claims_table, rollups_table, runs_table
from fastapi_voltro_schedules.records import (
    LIVE_STATUSES,
    ROLLED_UP_HOLDER,
    ROLLED_UP_TAG,
    RollupRecord,
)
from fastapi_voltro_schedules.store import RunOutcome, RunRecord, SQLStore, new_run_id
from fastapi_voltro_schedules.testing import ManualClock

T0 = datetime(2026, 5, 28, 9, 0, tzinfo=UTC)
ME = "replica-a"


def running(name: str, at: datetime, trigger: Trigger = Trigger.SELF) -> RunRecord:
    return RunRecord(
        id=new_run_id(),
        name=name,
        scheduled_at=at,
        status=RunStatus.RUNNING,
        trigger=trigger,
        coordination_outcome=CoordinationOutcome.SINGLE,
        fired_at=at,
        replica_id=ME,
    )


def ended(run: RunRecord, status: RunStatus, took_ms: int, **kw: Any) -> RunOutcome:
    return RunOutcome(
        run_id=run.id,
        status=status,
        finished_at=run.scheduled_at + timedelta(milliseconds=took_ms),
        name=run.name,
        trigger=run.trigger,
        scheduled_at=run.scheduled_at,
        fired_at=run.fired_at,
        roll_up=status is RunStatus.SUCCEEDED and run.trigger is not Trigger.MANUAL,
        **kw,
    )


async def fire(store: SQLStore, run: RunRecord) -> None:
    """What the engine does: the slot's claim and its ``running`` row in one transaction."""
    won = await store.claim_and_insert([run], ME, run.scheduled_at)
    assert won == {run.id}


async def count(store: SQLStore, table: Any, *where: Any) -> int:
    async with store.engine.connect() as conn:
        return int(
            (await conn.execute(select(func.count()).select_from(table).where(*where))).scalar_one()
        )


async def test_n_successes_leave_the_newest_row_and_the_rest_counted_per_hour(
    store: SQLStore,
) -> None:
    # 90 one-minute slots across two hours, each finishing alone (the steady case)
    slots = [T0 + timedelta(minutes=i) for i in range(90)]
    for i, at in enumerate(slots):
        run = running("tick", at)
        await fire(store, run)
        await store.finish_runs([ended(run, RunStatus.SUCCEEDED, took_ms=100 + i)], ME)
    rows = await store.list_runs("tick", limit=1000)
    assert [(r.scheduled_at, r.status, r.error_tag) for r in rows] == [
        (slots[-1], RunStatus.SUCCEEDED, ROLLED_UP_TAG)
    ]
    hours = await store.rollups(["tick"], T0, T0 + timedelta(hours=2))
    assert hours == [
        # the second hour's last slot is still the kept row: 29 of its 30 are counted
        RollupRecord("tick", T0 + timedelta(hours=1), 29, sum(range(160, 189)), 188),
        RollupRecord("tick", T0, 60, sum(range(100, 160)), 159),
    ]
    # the newest row is what catch-up, takeovers and the listing read
    last = await store.last_run("tick")
    assert last is not None and last.scheduled_at == slots[-1]
    outcome = (await store.outcomes(["tick"]))["tick"]
    assert outcome.scheduled_at == slots[-1] and outcome.status is RunStatus.SUCCEEDED
    # every folded slot's claim is still there (a late replica still loses it), held by the
    # rollup so the sweep of claims without rows leaves it be
    folded = [claim_key("tick", at) for at in slots[:-1]]
    assert await count(store, claims_table, claims_table.c.key.in_(folded)) == 89
    assert await count(store, claims_table, claims_table.c.replica_id == ROLLED_UP_HOLDER) == 89
    assert not await store.claim(claim_key("tick", slots[3]), "replica-b", slots[3])
    found, _ = await store.rowless_claims(T0 - timedelta(days=1), T0 + timedelta(days=1), 1000)
    assert found == []


async def test_failures_skips_and_manual_runs_keep_their_rows(store: SQLStore) -> None:
    ok1, bad, ok2 = (running("mixed", T0 + timedelta(minutes=i)) for i in range(3))
    manual = running("mixed", T0 + timedelta(minutes=1, seconds=30), Trigger.MANUAL)
    for run in (ok1, bad, ok2):
        await fire(store, run)
    await store.insert_runs([manual])
    await store.finish_runs([ended(ok1, RunStatus.SUCCEEDED, 10)], ME)
    await store.finish_runs(
        [ended(bad, RunStatus.FAILED, 20, error_tag="ValueError", error_message="boom")], ME
    )
    await store.finish_runs([ended(manual, RunStatus.SUCCEEDED, 5)], ME)
    await store.finish_runs([ended(ok2, RunStatus.SUCCEEDED, 30)], ME)
    rows = sorted(await store.list_runs("mixed", limit=100), key=lambda r: r.scheduled_at)
    assert [(r.id, r.status, r.error_tag) for r in rows] == [
        (bad.id, RunStatus.FAILED, "ValueError"),
        (manual.id, RunStatus.SUCCEEDED, None),
        (ok2.id, RunStatus.SUCCEEDED, ROLLED_UP_TAG),
    ]
    assert await store.rollups(["mixed"], T0, T0) == [RollupRecord("mixed", T0, 1, 10, 10)]


async def test_a_herds_batch_folds_each_schedule_once_and_a_retry_folds_nothing_twice(
    store: SQLStore,
) -> None:
    # two herds of three schedules, each herd's outcomes in one batch (the timer's herd)
    names = ["a", "b", "c"]
    first = [running(n, T0) for n in names]
    second = [running(n, T0 + timedelta(minutes=1)) for n in names]
    for herd in (first, second):
        await store.claim_and_insert(herd, ME, herd[0].scheduled_at)
        batch = [ended(r, RunStatus.SUCCEEDED, 50) for r in herd]
        await store.finish_runs(batch, ME)
    # the same batch again (a finish retried after its commit was lost): nothing moves
    await store.finish_runs(batch, ME)
    assert await count(store, runs_table) == 3
    assert await store.rollups(None, T0, T0) == [RollupRecord(n, T0, 1, 50, 50) for n in names]


async def test_a_success_of_a_schedule_recording_all_is_a_row_as_before(store: SQLStore) -> None:
    runs = [running("all", T0 + timedelta(minutes=i)) for i in range(3)]
    for run in runs:
        await fire(store, run)
        await store.finish_runs(
            [RunOutcome(run.id, RunStatus.SUCCEEDED, run.scheduled_at, name=run.name)], ME
        )
    assert len(await store.list_runs("all")) == 3
    assert await count(store, rollups_table) == 0


async def test_retention_prunes_old_hours(store: SQLStore) -> None:
    for i in range(3):  # three hours, two slots each: one counted per hour, the last kept
        for j in range(2):
            run = running("hourly", T0 + timedelta(hours=i, minutes=j))
            await fire(store, run)
            await store.finish_runs([ended(run, RunStatus.SUCCEEDED, 1)], ME)
    assert [r.hour for r in await store.rollups(["hourly"], T0, T0 + timedelta(hours=3))] == [
        T0 + timedelta(hours=2),
        T0 + timedelta(hours=1),
        T0,
    ]
    assert await store.sweep_rollups(T0 + timedelta(hours=2), limit=1) == 1
    assert await store.sweep_rollups(T0 + timedelta(hours=2), limit=100) == 1
    assert [r.hour for r in await store.rollups(None, T0, T0 + timedelta(hours=3))] == [
        T0 + timedelta(hours=2)
    ]


# ------------------------------------------------------------------ through the engine

HEARTBEAT_MS = 1000
TOKEN = "inspect-secret-for-record-tests"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def pulse(calls: list[tuple[str, datetime]], replica: str, fail_at: datetime) -> Schedule:
    async def handler(ctx: ScheduleContext) -> None:
        calls.append((replica, ctx.scheduled_at))
        if ctx.scheduled_at == fail_at:
            raise RuntimeError("the one bad slot")

    return define_schedule(
        name="pulse", cron="*/5 * * * * *", timezone="UTC", handler=handler, record="failures"
    )


async def settled(s: Scheduling, name: str, slot: datetime) -> None:
    """Wait until ``slot``'s run is over: the schedule's newest row is its, terminal (a
    success stays a row while it is the newest)."""

    async def done() -> bool:
        assert s.store is not None
        last = await s.store.last_run(name)
        return last is not None and last.scheduled_at == slot and last.status.terminal

    await wait_until(done, what=f"{name}@{slot:%H:%M:%S} settled")


@pytest.mark.parametrize("server", SERVERS)
async def test_two_replicas_fire_each_slot_once_and_leave_counts_not_rows(
    server: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue(f"{server}_url")
    await upgrade_to_head(url)
    clock = ManualClock(at(1))
    calls: list[tuple[str, datetime]] = []
    slots = [at(s) for s in range(5, 61, 5)]
    async with AsyncExitStack() as stack:
        replicas: list[Scheduling] = []
        for replica in ("pod-1", "pod-2"):
            config = SchedulingConfig(
                database_url=url,
                replica_id=replica,
                coordination="advisoryLock",
                schedule_heartbeat_ms=HEARTBEAT_MS,
            )
            scheduling = Scheduling([pulse(calls, replica, at(15))], config=config, clock=clock)
            replicas.append(await stack.enter_async_context(scheduling.run()))
        first = replicas[0]
        for slot in slots:
            await clock.advance((slot - clock.now()).total_seconds())
            await settled(first, "pulse", slot)
        # past three beats: both replicas' claims sweeps have looked at every folded claim
        await clock.advance(4 * HEARTBEAT_MS / 1000)
        store = first.store
        assert store is not None
        rows = sorted(await store.list_runs("pulse", limit=100), key=lambda r: r.scheduled_at)
        hours = await store.rollups(["pulse"], T0, T0)
        report = await audit_ledger(
            store, [pulse([], "audit", at(15))], at(0), at(60),
            heartbeat_ms=HEARTBEAT_MS, now=at(120),
        )  # fmt: skip
    assert sorted(slot for _, slot in calls) == slots  # once per slot, across both replicas
    assert [(r.scheduled_at, r.status) for r in rows] == [
        (at(15), RunStatus.FAILED),  # the failure keeps its row
        (at(60), RunStatus.SUCCEEDED),  # the newest success: what catch-up reads
    ]  # and no claim-without-row row: the folded claims are the rollup's
    assert [(h.hour, h.succeeded) for h in hours] == [(T0, 10)]
    assert report.clean and report.rolled_up == 10, report.text()


async def quiet(s: Scheduling) -> bool:
    """No ``running`` or ``queued`` row of ``pulse.acme`` left."""
    assert s.store is not None
    return not await s.store.live_runs("pulse.acme", LIVE_STATUSES)


@define_handler(name="tenantPulse")
async def tenant_pulse(ctx: ScheduleContext) -> None:
    RAN.append(ctx.scheduled_at)


RAN: list[datetime] = []


async def test_a_restart_catches_up_after_the_kept_row_and_reruns_nothing(
    database_url: str,
) -> None:
    """A run-time schedule with ``record="failures"`` and ``backfill="all"``: six slots run,
    five are counted, the process stops, 32 s pass, another boots — the catch-up runs the
    slots of the downtime only (not one rolled-up slot again), the policy came back from the
    stored version, and the operator's audit from the database alone exits 0."""
    await upgrade_to_head(database_url)
    RAN.clear()
    clock = ManualClock(at(1))
    path = "/_voltro/inspect/schedules/pulse.acme"
    auth = {"Authorization": f"Bearer {TOKEN}"}
    body = {
        "cron": "*/5 * * * * *", "timezone": "UTC", "handler": "tenantPulse",
        "backfill": "all", "record": "failures",
    }  # fmt: skip

    def boot() -> Scheduling:
        # the default heartbeat: a catch-up's queued rows wait in line on the real clock (the
        # database's), and a busy box must not read them silent for three short beats
        cfg = SchedulingConfig(
            database_url=database_url, replica_id="replica-a", inspect_token=TOKEN
        )
        return Scheduling([], config=cfg, clock=clock, handlers=[tenant_pulse], metrics=metrics)

    metrics = SchedulerMetrics(CollectorRegistry())
    first = boot()
    async with served(first) as client:
        created = await client.put(path, json=body, headers=auth)
        assert created.status_code == 201, created.text
        assert created.json()["record"] == "failures"
        for second in range(5, 31, 5):
            await clock.advance((at(second) - clock.now()).total_seconds())
            await wait_until(lambda second=second: at(second) in RAN, what=f"slot {second}")
            # over before the next slot comes: beside a run in flight it would be skipped
            await wait_until(lambda: quiet(first), what=f"slot {second} over")
        await clock.advance(1)
        view = (await client.get(path, headers=auth)).json()
    # the detail shows the hour's count: five of the six, the newest is still a row
    assert [(h["hour"], h["succeeded"]) for h in view["rollups"]] == [
        ("2026-05-28T09:00:00.000Z", 5)
    ]
    assert view["versions"][0]["record"] == "failures"
    first_run = list(RAN)
    # the metrics count every success, rolled up or not
    assert metrics.registry is not None
    succeeded = {"name": "pulse.acme", "status": "succeeded", "trigger": "self"}
    assert metrics.registry.get_sample_value("voltro_schedule_runs_total", succeeded) == 6
    await clock.advance(32)  # down from 31 s to 63 s: slots 35 … 60 passed unrun
    later = boot()
    async with later.run():
        assert later.store is not None
        await wait_until(lambda: at(60) in RAN, what="the catch-up ran the downtime's slots")
        # (the catch-up's last run over first: 65 s would be skipped beside it, on_overlap)
        await wait_until(lambda: quiet(later), what="the catch-up over")
        await clock.advance((at(65) - clock.now()).total_seconds())
        await wait_until(lambda: at(65) in RAN, what="the live timer goes on")
        await wait_until(lambda: quiet(later), what="every run over")
        rows = await later.store.list_runs("pulse.acme", limit=100)
        hours = await later.store.rollups(["pulse.acme"], T0, T0)
    assert first_run == [at(s) for s in range(5, 31, 5)]
    # every slot ran once: none of the rolled-up ones again (the kept 30 s row said where to
    # go on from)
    assert sorted(RAN) == [at(s) for s in range(5, 66, 5)], (RAN, rows)
    assert len(RAN) == len(set(RAN))
    assert [(r.scheduled_at, r.status, r.error_tag) for r in rows] == [
        (at(65), RunStatus.SUCCEEDED, ROLLED_UP_TAG)
    ]
    assert [(h.hour, h.succeeded) for h in hours] == [(T0, 12)]
    done = audit_database_cli(database_url, at(0), at(66))
    assert done.returncode == 0, (done.stdout, done.stderr)
    report = json.loads(done.stdout)
    assert report["gapChecked"] == ["pulse.acme"] and report["rolledUp"] == 12, report


async def test_a_bad_record_value_is_refused_naming_the_field(sqlite_url: str) -> None:
    with pytest.raises(ScheduleDefinitionError) as info:
        define_schedule(
            name="x", cron="0 9 * * *", timezone="UTC", handler=tenant_pulse, record="errors"
        )
    assert str(info.value) == (
        'define_schedule("x"): record=\'errors\' is not one of "all" | "failures" — pass one '
        "of those"
    )
    await upgrade_to_head(sqlite_url)
    cfg = SchedulingConfig(database_url=sqlite_url, replica_id="replica-a", inspect_token=TOKEN)
    s = Scheduling([], config=cfg, clock=ManualClock(at(1)), handlers=[tenant_pulse])
    auth = {"Authorization": f"Bearer {TOKEN}"}
    path = "/_voltro/inspect/schedules/pulse.acme"
    body = {"cron": "0 9 * * *", "timezone": "UTC", "handler": "tenantPulse"}
    async with served(s) as client:
        bad = await client.put(path, json={**body, "record": "errors"}, headers=auth)
        assert (bad.status_code, bad.json()["field"]) == (422, "record"), bad.text
        assert '"all" | "failures"' in bad.json()["detail"]
        with pytest.raises(InvalidScheduleError) as refused:
            await s.put_schedule("pulse.acme", record="none", **body)
        assert refused.value.field == "record"
        assert (await client.put(path, json=body, headers=auth)).status_code == 201
        same = await client.put(path, json={**body, "record": "all"}, headers=auth)
        assert same.status_code == 200
        edited = await client.put(path, json={**body, "record": "failures"}, headers=auth)
        assert edited.json()["record"] == "failures"
        view = (await client.get(path, headers=auth)).json()
    # the policy is part of the definition: a change is a new version, the same one is not
    assert [(v["version"], v["record"]) for v in view["versions"]] == [
        (2, "failures"),
        (1, "all"),
    ]


async def test_a_duplicate_arrival_of_a_rolled_up_slot_is_answered_at_once(
    sqlite_url: str,
) -> None:
    """An external schedule recording failures: the 12:00 arrival ran and succeeded, 12:01's
    success folded it. A CronJob's retry of 12:00 after a restart finds no row — and its claim,
    held by the rollup: a duplicate at once, not after the wait for a row that never comes."""
    ran: list[datetime] = []

    async def report(ctx: ScheduleContext) -> None:
        ran.append(ctx.scheduled_at)

    job = define_schedule(
        name="report", cron="* * * * *", timezone="UTC", trigger="external", handler=report,
        record="failures",
    )  # fmt: skip
    await upgrade_to_head(sqlite_url)
    clock = ManualClock(T0 + timedelta(seconds=30))
    config = SchedulingConfig(database_url=sqlite_url)
    s = Scheduling([job], config=config, clock=clock)
    async with s.run():
        first = await arrive(s, "report")
        assert s.store is not None
        running_store = s.store

        async def first_ended() -> bool:
            return all(r.status.terminal for r in await running_store.list_runs("report"))

        # 12:00's run ends before 12:01 arrives, as a minute later in real time (a run still
        # going at 12:01 makes 12:01 an overlap skip, which folds nothing)
        await wait_until(first_ended, what="12:00's run over")
        await clock.advance(60)
        second = await arrive(s, "report")
        assert s.store is not None
        store = s.store

        async def folded() -> bool:
            return len(await store.list_runs("report")) == 1 and bool(
                await store.rollups(["report"], T0, T0)
            )

        await wait_until(folded, what="12:00 folded by 12:01's success")
    assert (first.status, first.scheduled_at) == ("accepted", T0)
    assert (second.status, second.scheduled_at) == ("accepted", T0 + timedelta(minutes=1))
    restarted = Scheduling([job], config=config, clock=clock)
    async with restarted.run():
        began = anyio.current_time()
        again = await arrive(restarted, "report", T0)
        took = anyio.current_time() - began
    assert (again.status, again.run) == ("duplicate", None)
    assert took < DUPLICATE_WAIT_SECONDS, took  # answered from the claim, no 5 s wait
    assert ran == [T0, T0 + timedelta(minutes=1)]
