"""Queued rows the line can no longer reach: written off at boot, and never swept.

Real rows on Postgres and MariaDB (and SQLite, where the line writes no queued row of its own
but a database shared with a multi-instance deployment may still hold some). A queued row of a
schedule that was renamed away is written off at the next boot — ``missed`` with
``error_tag="written-off"``, counted ``abandoned`` — but only when it is also silent: a waiter
still beating under a name this app does not know belongs to another deployment. So is the
queued row of a schedule still declared but no longer ``on_overlap="queue"``: its firings never
look at the line again. The retention sweep deletes old finished rows and never a queued one.
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import REGISTRY
from support.queue_lines import Line
from support.running import runs_of
from support.waiting import wait_until

from fastapi_voltro_schedules import (
    RunStatus,
    Schedule,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    Trigger,
    define_schedule,
)
from fastapi_voltro_schedules.audit import audit_ledger
from fastapi_voltro_schedules.enums import CoordinationOutcome
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.store import RunRecord, create_store, new_run_id
from fastapi_voltro_schedules.testing import ManualClock

T0 = datetime(2026, 6, 1, 12, 0, 30, tzinfo=UTC)
STORES = [
    pytest.param("sqlite"),
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("mariadb", marks=pytest.mark.mariadb),
]


def _queued(name: str, *, seen: datetime, replica: str) -> RunRecord:
    return RunRecord(
        id=new_run_id(),
        name=name,
        scheduled_at=datetime(2026, 6, 1, 11, 0, tzinfo=UTC),
        status=RunStatus.QUEUED,
        trigger=Trigger.SELF,
        coordination_outcome=CoordinationOutcome.WON_LOCK,
        fired_at=seen - timedelta(minutes=5),
        heartbeat_at=seen,
        replica_id=replica,
    )


def _abandoned(name: str) -> float:
    value = REGISTRY.get_sample_value(
        "voltro_schedule_queue_recoveries_total", {"name": name, "outcome": "abandoned"}
    )
    return value or 0.0


@pytest.mark.parametrize("store", STORES)
async def test_boot_writes_off_silent_queued_rows_of_undeclared_names_and_keeps_the_rest(
    store: str, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    url = request.getfixturevalue(f"{store}_url")
    await upgrade_to_head(url)
    renamed = f"renamed-{uuid.uuid4().hex[:8]}"
    foreign = f"other-deploy-{uuid.uuid4().hex[:8]}"
    # 30 s heartbeat: dead after 90 s of silence.
    silent = _queued(renamed, seen=T0 - timedelta(hours=1), replica="old-pod")
    silent_too = _queued(renamed, seen=T0 - timedelta(minutes=2), replica="old-pod-2")
    beating = _queued(foreign, seen=T0 - timedelta(seconds=10), replica="their-pod")
    # A declared schedule's silent waiter is the line's business (adoption), not boot's.
    declared = _queued("job", seen=T0 - timedelta(hours=1), replica="old-pod")
    seed = create_store(url)
    try:
        await seed.insert_runs([silent, silent_too, beating, declared])
    finally:
        await seed.dispose()

    @define_schedule(name="job", cron="0 0 1 1 *", timezone="UTC", on_overlap="queue")
    async def job(ctx: ScheduleContext) -> None:
        return None

    before = _abandoned(renamed)
    config = SchedulingConfig(database_url=url, replica_id="replica-new")
    scheduling = Scheduling([job], config=config, clock=ManualClock(T0))
    with caplog.at_level(logging.WARNING, logger="fastapi_voltro_schedules"):
        async with scheduling.run():
            assert scheduling.store is not None
            rows = {r.id: r for r in await scheduling.store.list_runs(None, limit=100)}
    for row in (silent, silent_too):
        after = rows[row.id]
        assert after.status is RunStatus.MISSED, after
        assert after.error_tag == "written-off"
        assert after.error_message and f'"{renamed}" is no longer declared' in after.error_message
        assert after.finished_at == T0
        # What it was fired as is kept; only its fate is recorded.
        assert after.trigger is Trigger.SELF and after.replica_id == row.replica_id
    assert rows[beating.id].status is RunStatus.QUEUED
    assert rows[beating.id].heartbeat_at == beating.heartbeat_at
    assert rows[declared.id].status is RunStatus.QUEUED
    assert _abandoned(renamed) - before == 2
    assert _abandoned(foreign) == 0
    assert (
        f"scheduler: wrote off queued firings of a schedule no longer declared  name={renamed} "
        "rows=2" in caplog.text
    )
    assert foreign not in caplog.text


@pytest.mark.parametrize(
    "store",
    [
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mariadb),
    ],
)
async def test_boot_writes_off_the_queued_rows_of_a_schedule_no_longer_queue(
    store: str, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    url = request.getfixturevalue(f"{store}_url")
    await upgrade_to_head(url)
    name = f"batch-{uuid.uuid4().hex[:8]}"
    line = Line()
    line.hold = True

    def batch(on_overlap: str) -> Schedule:
        return define_schedule(
            name=name, cron="* * * * *", timezone="UTC", on_overlap=on_overlap, handler=line
        )

    # A queue schedule leaves a firing in line: 12:01 runs (held open), 12:02 waits behind it
    # as a queued row; then the replica stops (the held run is cancelled past a short grace).
    clock = ManualClock(T0)
    config = SchedulingConfig(database_url=url, replica_id="old-pod", shutdown_grace_ms=50)
    first = Scheduling([batch("queue")], config=config, clock=clock)
    async with first.run():
        await clock.advance(30)
        await wait_until(lambda: len(line.spans) == 1, what="12:01 to start")
        await clock.advance(60)

        async def queued() -> list[RunRecord]:
            return [r for r in await runs_of(first, name) if r.status is RunStatus.QUEUED]

        (waiter,) = await wait_until(queued, what="12:02's queued row")
    assert waiter.scheduled_at == datetime(2026, 6, 1, 12, 2, tzinfo=UTC)

    # The next deploy declares it on_overlap="skip": no firing of it looks at the line again.
    before = _abandoned(name)
    later = T0 + timedelta(minutes=10)  # the waiter silent far past 3 heartbeats
    config = SchedulingConfig(database_url=url, replica_id="new-pod")
    skip = batch("skip")
    second = Scheduling([skip], config=config, clock=ManualClock(later))
    with caplog.at_level(logging.WARNING, logger="fastapi_voltro_schedules"):
        async with second.run():
            rows = {r.id: r for r in await runs_of(second, name)}
    after = rows[waiter.id]
    assert after.status is RunStatus.MISSED, after
    assert after.error_tag == "written-off"
    assert (
        after.error_message and 'no longer on_overlap="queue" (now "skip")' in after.error_message
    )
    assert after.finished_at == later
    assert after.trigger is Trigger.SELF and after.replica_id == "old-pod"
    assert not [r for r in rows.values() if r.status is RunStatus.QUEUED]
    assert _abandoned(name) - before == 1
    assert (
        "scheduler: wrote off queued firings of a schedule no longer on_overlap=queue (now skip)"
        f"  name={name} rows=1" in caplog.text
    )
    assert len(line.spans) == 1  # the written-off firing never ran
    audit_store = create_store(url)
    try:
        report = await audit_ledger(audit_store, [skip], T0 - timedelta(hours=1), later, now=later)
    finally:
        await audit_store.dispose()
    assert report.clean, report.text()


@pytest.mark.parametrize("store", STORES)
async def test_retention_never_sweeps_the_lines_queued_rows(
    store: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue(f"{store}_url")
    await upgrade_to_head(url)
    old = T0 - timedelta(days=3)

    def finished(status: RunStatus) -> RunRecord:
        return RunRecord(
            id=new_run_id(),
            name="job",
            scheduled_at=old,
            status=status,
            trigger=Trigger.SELF,
            fired_at=old,
            finished_at=old,
            replica_id="r",
        )

    # Days-old waiters: one silent (a corpse the next firing adopts or writes off — never the
    # sweep), one beating; both far older than the retention window.
    waiters = [
        _queued("job", seen=old, replica="pod-a"),
        _queued("job", seen=T0 - timedelta(seconds=5), replica="pod-b"),
    ]
    doomed = [finished(s) for s in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.MISSED)]
    seed = create_store(url)
    try:
        await seed.insert_runs([*waiters, *doomed])
    finally:
        await seed.dispose()

    @define_schedule(name="job", cron="0 0 1 1 *", timezone="UTC", on_overlap="queue")
    async def job(ctx: ScheduleContext) -> None:
        return None

    config = SchedulingConfig(database_url=url, replica_id="r", run_retention_ms=24 * 3600_000)
    scheduling = Scheduling([job], config=config, clock=ManualClock(T0))
    async with scheduling.run():
        assert scheduling.store is not None and scheduling.engine is not None
        # The retention loop's first pass runs at boot (maybe not finished yet): sweep again,
        # so every doomed row is gone whichever pass took it.
        await scheduling.engine.maintenance.sweep()
        left = {r.id: r for r in await scheduling.store.list_runs("job", limit=100)}
    assert sorted(left) == sorted(w.id for w in waiters)
    assert all(r.status is RunStatus.QUEUED for r in left.values())
