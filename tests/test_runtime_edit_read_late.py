"""An edit another process wrote, read by the firer at its next beat (SPEC §7; issue 31).

Until the firer reads the edit it runs the old cadence (documented: up to one heartbeat). The
new version owns its cadence's slots from the edit's ``effective_from`` on, so the slots of the
new cadence that came due in that beat are owed too — unless the old cadence ran that very
slot. Nobody else fires them (the writer does not fire: a follower on the SQLite file, a
non-owner under ``cluster``), so the firer must account for them when it reads the edit:
re-arming after the last old-cadence slot it fired left them without a row, an audit gap.

The same beat hid a second gap: a replica that booted with no version recorded read its first
changes from one look-back (60 s) before that read, not from its boot — with a heartbeat longer
than the look-back, a write made in its first beat was never read there.

In process on one SQLite file and one manual clock: a leader (holds the firer lock) and a
follower (serves the routes — here, the writes); and the pure rule
(:func:`~fastapi_voltro_schedules.planning.unplanned_after_edit`) as a table.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from support.running import runs_of
from support.waiting import wait_until

from fastapi_voltro_schedules import (
    RunStatus,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_handler,
)
from fastapi_voltro_schedules.audit import audit_ledger
from fastapi_voltro_schedules.cron import CronSpec
from fastapi_voltro_schedules.planning import unplanned_after_edit
from fastapi_voltro_schedules.store import RunRecord, create_store
from fastapi_voltro_schedules.testing import ManualClock

T0 = datetime(2026, 6, 1, 10, 0, 5, tzinfo=UTC)
NAME = "report.acme"
HEARTBEAT_MS = 30_000
"""The leader first reads run-time writes at T0 + 30 s = 10:00:35: an edit written at 10:00:12
is read after its old cadence (every 10 s) fired 10:00:20 and 10:00:30 there."""

ran: list[tuple[datetime, str]] = []


@define_handler(name="tenantReport")
async def tenant_report(ctx: ScheduleContext) -> None:
    ran.append((ctx.scheduled_at, str(ctx.args.get("v", ""))))


def at(second: int, minute: int = 0) -> datetime:
    return datetime(2026, 6, 1, 10, minute, second, tzinfo=UTC)


def scheduling(url: str, replica: str, clock: ManualClock, heartbeat_ms: int) -> Scheduling:
    config = SchedulingConfig(
        database_url=url, replica_id=replica, schedule_heartbeat_ms=heartbeat_ms
    )
    return Scheduling(config=config, clock=clock, handlers=[tenant_report])


async def to(clock: ManualClock, instant: datetime) -> None:
    await clock.advance((instant - clock.now()).total_seconds())


async def settled_rows(scheduling: Scheduling, count: int) -> list[RunRecord]:
    async def settled() -> list[RunRecord] | None:
        found = await runs_of(scheduling, NAME)
        done = len(found) == count and all(r.status.terminal for r in found)
        return found if done else None

    found: list[RunRecord] = await wait_until(settled, what=f"{count} settled rows")
    return found


async def test_an_edit_read_at_the_next_beat_leaves_no_slot_of_the_new_cadence_unaccounted(
    sqlite_url: str,
) -> None:
    ran.clear()
    clock = ManualClock(T0)
    leader = scheduling(sqlite_url, "leader", clock, HEARTBEAT_MS)
    follower = scheduling(sqlite_url, "follower", clock, HEARTBEAT_MS)
    async with leader.run(None):
        assert leader.fires_here
        async with follower.run(None):
            assert not follower.fires_here
            await leader.put_schedule(
                NAME, cron="*/10 * * * * *", timezone="UTC", handler="tenantReport"
            )
            await to(clock, at(10))
            await settled_rows(leader, 1)
            await to(clock, at(12))
            # the follower writes the edit; the leader reads it at its next beat (10:00:35)
            await follower.put_schedule(
                NAME, cron="*/15 * * * * *", timezone="UTC", handler="tenantReport", args={"v": 2}
            )
            await to(clock, at(15))  # the new cadence's slot: nobody fires it yet
            await to(clock, at(20))  # the old cadence's, on the leader
            await settled_rows(leader, 2)
            await to(clock, at(30))  # both cadences': the old version runs it
            await settled_rows(leader, 3)
            await to(clock, at(35))  # the leader's beat: it reads the edit
            await wait_until(
                lambda: leader.running_engine().next_firing(NAME) == at(45),
                what="the leader re-armed on the new cadence",
            )
            await settled_rows(leader, 4)  # 10:00:15, the new version's, accounted for now
            await to(clock, at(45))
            found = await settled_rows(leader, 5)
    assert [(r.scheduled_at, r.status) for r in found] == [
        (at(10), RunStatus.SUCCEEDED),
        (at(15), RunStatus.SUCCEEDED),  # the new version's slot of that beat, fired late
        (at(20), RunStatus.SUCCEEDED),  # the old cadence, before the leader read the edit
        (at(30), RunStatus.SUCCEEDED),  # run once, by the old version
        (at(45), RunStatus.SUCCEEDED),
    ]
    assert sorted(ran) == [(at(10), ""), (at(15), "2"), (at(20), ""), (at(30), ""), (at(45), "2")]
    store = create_store(sqlite_url)
    try:  # 3 heartbeats on: the audit judges every slot up to 10:00:30
        now = at(0, minute=2)
        report = await audit_ledger(store, [], T0 - timedelta(hours=1), now, now=now)
    finally:
        await store.dispose()
    assert report.clean, report.text()
    assert NAME in report.gap_checked


async def test_a_write_before_the_first_beat_is_read_whatever_the_heartbeat(
    sqlite_url: str,
) -> None:
    """A beat longer than the read's look-back (60 s): the first read of a replica that booted
    with no version recorded must still reach back to its boot, not to one look-back before
    the read — or a write made in between is never read there."""
    clock = ManualClock(T0)
    heartbeat_ms = 5 * 60_000
    leader = scheduling(sqlite_url, "leader", clock, heartbeat_ms)
    follower = scheduling(sqlite_url, "follower", clock, heartbeat_ms)
    async with leader.run(None):
        async with follower.run(None):
            await to(clock, at(10))
            await follower.put_schedule(
                NAME, cron="0 * * * * *", timezone="UTC", handler="tenantReport"
            )
            await to(clock, T0 + timedelta(milliseconds=heartbeat_ms))  # the leader's beat
            # armed from the write: its passed slots planned (10:05 run, the older missed)
            await wait_until(
                lambda: leader.running_engine().next_firing(NAME) == at(0, minute=6),
                what="the leader arming the schedule written before its first beat",
            )
            rows = await settled_rows(leader, 5)
    assert [r.scheduled_at for r in rows] == [at(0, minute=m) for m in range(1, 6)]


def _spec(cron: str) -> CronSpec:
    return CronSpec.parse(cron, "UTC")


@pytest.mark.parametrize(
    ("old", "new", "effective", "last_planned", "owed"),
    [
        # read in time: the old cadence planned nothing past the edit
        ("*/10 * * * * *", "*/15 * * * * *", at(12), at(10), []),
        ("*/10 * * * * *", "*/15 * * * * *", at(12), at(12), []),
        # read a beat late: :15 is the new version's and nobody planned it; :30 ran once
        ("*/10 * * * * *", "*/15 * * * * *", at(12), at(30), [at(15)]),
        ("*/2 * * * *", "*/3 * * * *", at(30, 2), at(0, 6), [at(0, 3)]),
        # the same cadence (an args or handler edit): every slot was planned
        ("*/10 * * * * *", "*/10 * * * * *", at(12), at(40), []),
        # a sparser cadence with no instant in the stretch
        ("*/10 * * * * *", "0 * * * * *", at(12), at(40), []),
        # a denser one: each of its instants the old one did not share
        ("*/20 * * * * *", "*/5 * * * * *", at(12), at(40), [at(15), at(25), at(30), at(35)]),
    ],
)
def test_unplanned_after_edit(
    old: str, new: str, effective: datetime, last_planned: datetime, owed: list[datetime]
) -> None:
    assert unplanned_after_edit(_spec(old), _spec(new), effective, last_planned) == owed
