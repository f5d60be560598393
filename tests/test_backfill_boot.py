"""Boot backfill: slots that passed while no process ran, per policy, before the timer arms."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest
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
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.store import RunRecord, Store, create_store, new_run_id
from fastapi_voltro_schedules.testing import ManualClock


def at(minute: int) -> datetime:
    return datetime(2026, 6, 1, 12, 0, tzinfo=UTC) + timedelta(minutes=minute)


BOOT = at(5) + timedelta(seconds=30)  # down from just after 12:00 until 12:05:30


def schedule(policy: str, calls: list[datetime]) -> Schedule:
    @define_schedule(name="minutely", cron="* * * * *", timezone="UTC", backfill=policy)
    async def minutely(ctx: ScheduleContext) -> None:
        calls.append(ctx.scheduled_at)

    return minutely


def row(scheduled_at: datetime, trigger: Trigger = Trigger.SELF) -> RunRecord:
    return RunRecord(
        id=new_run_id(), name="minutely", scheduled_at=scheduled_at, status=RunStatus.SUCCEEDED,
        trigger=trigger, fired_at=scheduled_at, finished_at=scheduled_at, replica_id="old",
    )


async def seed(url: str, rows: list[RunRecord]) -> None:
    await upgrade_to_head(url)
    store = create_store(url)
    try:
        await store.insert_runs(rows)
    finally:
        await store.dispose()


async def ledger(store: Store | None) -> list[RunRecord]:
    assert store is not None
    rows = await store.list_runs("minutely", limit=5000)
    return sorted((r for r in rows if r.replica_id != "old"), key=lambda r: r.scheduled_at)


@pytest.mark.parametrize(
    ("policy", "fired", "missed"),
    [
        ("skip", [], [1, 2, 3, 4, 5]),
        ("latest", [5], [1, 2, 3, 4]),
        ("all", [1, 2, 3, 4, 5], []),
    ],
)
async def test_downtime_across_five_slots(
    sqlite_url: str, policy: str, fired: list[int], missed: list[int]
) -> None:
    # A manual run inside the gap does not move the schedule's clock.
    await seed(sqlite_url, [row(at(0)), row(at(3) + timedelta(seconds=7), Trigger.MANUAL)])
    calls: list[datetime] = []
    clock = ManualClock(BOOT)
    config = SchedulingConfig(database_url=sqlite_url, replica_id="new")
    async with Scheduling([schedule(policy, calls)], config=config, clock=clock).run() as s:
        # Before the timer was armed: every missed row is written, the first catch-up admitted.
        rows = await ledger(s.store)
        assert [r.scheduled_at for r in rows if r.status is RunStatus.MISSED] == [
            at(m) for m in missed
        ]
        if fired:
            assert rows and any(r.scheduled_at == at(fired[0]) for r in rows)

        async def caught_up() -> bool:
            return len(calls) == len(fired)

        await wait_until(caught_up)
        assert s.engine is not None and s.engine.next_firing("minutely") == at(6)
        await clock.advance(30)  # the first live slot, 12:06

        async def settled() -> bool:
            rows = await ledger(s.store)
            return at(6) in calls and len(rows) >= 6 and all(r.status.terminal for r in rows)

        # Every row written and over, the timer at 12:07: nothing else will run or write.
        await wait_until(settled)
        rows = await ledger(s.store)
    assert calls == [at(m) for m in fired] + [at(6)]  # in order, each with its own slot
    by_slot = {r.scheduled_at: r for r in rows}
    assert len(by_slot) == len(rows)  # one row per slot
    for m in [*fired, 6]:
        assert by_slot[at(m)].status is RunStatus.SUCCEEDED
        assert by_slot[at(m)].trigger is Trigger.SELF
    for m in missed:
        assert by_slot[at(m)].status is RunStatus.MISSED
    assert sorted(by_slot) == [at(m) for m in range(1, 7)]  # no silent hole


async def test_a_schedule_that_never_ran_has_nothing_to_backfill(sqlite_url: str) -> None:
    calls: list[datetime] = []
    config = SchedulingConfig(database_url=sqlite_url)
    scheduling = Scheduling([schedule("all", calls)], config=config, clock=ManualClock(BOOT))
    async with scheduling.run() as s:
        # Armed (run() returns once it is), so the boot backfill has had its say; the timer's
        # first instant, 12:06, has not come.
        assert s.engine is not None and s.engine.next_firing("minutely") == at(6)
        assert await ledger(s.store) == []
    assert calls == []


async def test_the_walk_is_capped_at_1000_slots_and_says_so(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    await seed(sqlite_url, [row(at(0))])
    clock = ManualClock(at(3000) + timedelta(seconds=30))
    config = SchedulingConfig(database_url=sqlite_url, replica_id="new")
    with caplog.at_level(logging.INFO, logger="fastapi_voltro_schedules"):
        async with Scheduling([schedule("skip", [])], config=config, clock=clock).run() as s:
            rows = await ledger(s.store)
    assert len(rows) == 1000
    assert rows[0].scheduled_at == at(2001) and rows[-1].scheduled_at == at(3000)
    assert any("capped at the newest 1000 slots" in r.getMessage() for r in caplog.records)


async def test_two_replicas_booting_at_once_catch_up_once(postgres_url: str) -> None:
    await seed(postgres_url, [row(at(0))])
    calls: list[datetime] = []
    clock = ManualClock(BOOT)
    replicas = [
        Scheduling(
            [schedule("latest", calls)],
            config=SchedulingConfig(database_url=postgres_url, replica_id=f"replica-{i}"),
            clock=clock,
        )
        for i in range(2)
    ]
    async with replicas[0].run(), replicas[1].run():

        async def done() -> bool:
            rows = await ledger(replicas[0].store)
            return len(rows) == 5 and all(r.status.terminal for r in rows)

        # Both catch-ups were admitted (or lost) before run() returned, and the winner's run
        # is over: nothing else will run or write before 12:06, which never comes.
        await wait_until(done)
        rows = await ledger(replicas[0].store)
    assert calls == [at(5)]  # one catch-up run across both replicas
    assert [(r.scheduled_at, r.status) for r in rows] == [
        (at(1), RunStatus.MISSED),
        (at(2), RunStatus.MISSED),
        (at(3), RunStatus.MISSED),
        (at(4), RunStatus.MISSED),
        (at(5), RunStatus.SUCCEEDED),
    ]
    assert all(r.coordination_outcome == "wonLock" for r in rows)


async def test_a_slot_of_the_last_moments_is_left_to_the_live_timer(sqlite_url: str) -> None:
    # Booting 1 s after 12:05: that slot is not downtime — a peer may be firing it right now —
    # so the live timer claims and runs it; only 12:01 … 12:04 are the backfill's.
    await seed(sqlite_url, [row(at(0))])
    calls: list[datetime] = []
    clock = ManualClock(at(5) + timedelta(seconds=1))
    config = SchedulingConfig(database_url=sqlite_url, replica_id="new")
    async with Scheduling([schedule("skip", calls)], config=config, clock=clock).run() as s:

        async def ran() -> bool:
            rows = await ledger(s.store)
            return calls == [at(5)] and len(rows) >= 5 and all(r.status.terminal for r in rows)

        await wait_until(ran)
        rows = await ledger(s.store)
    assert [(r.scheduled_at, r.status) for r in rows] == [
        (at(1), RunStatus.MISSED),
        (at(2), RunStatus.MISSED),
        (at(3), RunStatus.MISSED),
        (at(4), RunStatus.MISSED),
        (at(5), RunStatus.SUCCEEDED),
    ]
