"""``voltro schedule audit`` reports a gap only where a row is owed (issue 29 item 11).

Two false alarms of the audit before definition versions: a 2-minute pause was reported as
28 gaps (exit 1) — the slots the timer rightly dropped while paused — and a range backfill of
slots from before the schedule's first run made it judge every slot since the first *manual*
row. Neither is owed: nothing runs while paused, and a range backfill does not move when a
schedule came to exist. On every store, in-process on the injected clock.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

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
from fastapi_voltro_schedules.audit import AuditReport, audit_ledger
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.testing import ManualClock

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
NAME = "every5s"


def every5s(calls: list[datetime]) -> Schedule:
    async def handler(ctx: ScheduleContext) -> None:
        calls.append(ctx.scheduled_at)

    return define_schedule(name=NAME, cron="*/5 * * * * *", timezone="UTC", handler=handler)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


async def booted_audit(scheduling: Scheduling, schedule: Schedule, end: datetime) -> AuditReport:
    assert scheduling.store is not None
    return await audit_ledger(
        scheduling.store,
        [schedule],
        T0 - timedelta(hours=2),
        end,
        heartbeat_ms=scheduling.config.schedule_heartbeat_ms,
        now=end + timedelta(minutes=5),
    )


async def fired_through(scheduling: Scheduling, clock: ManualClock, slot: datetime) -> None:
    """Advance slot by slot to ``slot``, each one settled before the next is due (one jump
    over several slots would be falling behind: the older ones recorded ``missed``)."""
    while clock.now() < slot:
        due = min(slot, clock.now().replace(microsecond=0) + timedelta(seconds=5))
        due -= timedelta(seconds=due.second % 5)
        if due <= clock.now():
            due += timedelta(seconds=5)
        await clock.advance((due - clock.now()).total_seconds())

        async def settled(due: datetime = due) -> bool:
            rows = await runs_of(scheduling, NAME)
            return any(r.scheduled_at == due for r in rows) and all(r.status.terminal for r in rows)

        await wait_until(settled, what=f"{NAME} settled through {due:%H:%M:%S}")


async def test_a_paused_span_is_not_a_gap(database_url: str) -> None:
    await upgrade_to_head(database_url)
    calls: list[datetime] = []
    schedule = every5s(calls)
    clock = ManualClock(at(1))
    config = SchedulingConfig(database_url=database_url, replica_id="pod-1")
    async with Scheduling([schedule], config=config, clock=clock).run() as scheduling:
        await fired_through(scheduling, clock, at(20))
        await scheduling.pause(NAME, by="operator", reason="2 minutes of maintenance")
        await clock.advance(120)  # 24 slots fall due while paused: dropped, no row
        await scheduling.resume(NAME, by="operator")
        await fired_through(scheduling, clock, at(160))
        rows = await runs_of(scheduling, NAME)
        report = await booted_audit(scheduling, schedule, at(160))
    paused = [r for r in rows if at(20) < r.scheduled_at <= at(140)]
    assert paused == []  # nothing ran or was recorded while paused
    assert calls[-1] == at(160)
    assert report.clean, report.text()
    assert report.gap_checked == (NAME,)


async def test_every_paused_span_is_not_a_gap_not_only_the_latest(database_url: str) -> None:
    # The pauses table keeps one row per schedule — a second pause reuses it — so before the
    # spans were kept the audit knew only the latest span and reported the first one's 12
    # dropped slots as gaps (exit 1).
    await upgrade_to_head(database_url)
    calls: list[datetime] = []
    schedule = every5s(calls)
    clock = ManualClock(at(1))
    config = SchedulingConfig(database_url=database_url, replica_id="pod-1")
    async with Scheduling([schedule], config=config, clock=clock).run() as scheduling:
        await fired_through(scheduling, clock, at(20))
        await scheduling.pause(NAME, by="operator", reason="first")
        await clock.advance(60)  # 12 slots dropped: (20, 80]
        await scheduling.resume(NAME, by="operator")
        await fired_through(scheduling, clock, at(100))
        await scheduling.pause(NAME, by="operator", reason="second")
        await clock.advance(30)  # 6 slots dropped: (100, 130]
        await scheduling.resume(NAME, by="operator")
        await fired_through(scheduling, clock, at(150))
        rows = await runs_of(scheduling, NAME)
        assert scheduling.store is not None
        spans = await scheduling.store.pause_spans()
        report = await booted_audit(scheduling, schedule, at(150))
    assert [(s.reason, s.paused_at, s.resumed_at) for s in spans] == [
        ("first", at(20), at(80)),
        ("second", at(100), at(130)),
    ]
    dropped = [
        r for r in rows if at(20) < r.scheduled_at <= at(80) or at(100) < r.scheduled_at <= at(130)
    ]
    assert dropped == []  # nothing ran or was recorded while paused
    assert [c for c in calls if at(80) < c <= at(100)] == [at(85), at(90), at(95), at(100)]
    assert report.clean, report.text()
    assert report.gap_checked == (NAME,)


async def test_pausing_a_paused_schedule_opens_no_second_span(database_url: str) -> None:
    await upgrade_to_head(database_url)
    calls: list[datetime] = []
    schedule = every5s(calls)
    clock = ManualClock(at(1))
    config = SchedulingConfig(database_url=database_url, replica_id="pod-1")
    async with Scheduling([schedule], config=config, clock=clock).run() as scheduling:
        assert scheduling.store is not None
        await scheduling.pause(NAME, by="operator", reason="first")
        await clock.advance(10)
        await scheduling.pause(NAME, by="operator", reason="again")  # the first pause wins
        open_spans = await scheduling.store.pause_spans()
        await scheduling.resume(NAME, by="operator")
        await scheduling.resume(NAME, by="operator")  # already resumed: nothing to close
        closed = await scheduling.store.pause_spans()
    assert [(s.reason, s.paused_at, s.resumed_at) for s in open_spans] == [("first", at(1), None)]
    assert [(s.reason, s.paused_at, s.resumed_at) for s in closed] == [("first", at(1), at(11))]


async def test_a_range_backfill_before_the_first_run_owes_nothing_older(database_url: str) -> None:
    await upgrade_to_head(database_url)
    calls: list[datetime] = []
    schedule = every5s(calls)
    clock = ManualClock(at(1))
    config = SchedulingConfig(database_url=database_url, replica_id="pod-1")
    async with Scheduling([schedule], config=config, clock=clock).run() as scheduling:
        await fired_through(scheduling, clock, at(15))
        # an operator backfills two slots from an hour before the schedule existed
        summary = await scheduling.backfill(NAME, at(-3600), at(-3590), confirm=True)
        assert summary.succeeded == 2
        rows = await runs_of(scheduling, NAME)
        report = await booted_audit(scheduling, schedule, at(15))
    assert [r.trigger for r in rows[:2]] == [Trigger.MANUAL, Trigger.MANUAL]
    assert all(r.status is RunStatus.SUCCEEDED for r in rows), [
        (f"{r.scheduled_at:%H:%M:%S}", r.status.value) for r in rows
    ]
    # the hour between the backfilled slots and the first boot is not owed
    assert report.clean, report.text()
