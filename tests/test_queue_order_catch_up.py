"""A ``queue`` line runs catch-up slots and live slots in ``scheduled_at`` order (issue 29
item 4; the seed orders the line by ``scheduledAt``).

Down from 09:00 until 09:35 with ``backfill="all"``: 09:10, 09:20 and 09:30 are owed. While
09:10 still runs, the live 09:40 falls due. Before, the catch-up admitted one slot after the
other finished, so 09:40 joined the line first and the handlers ran 09:10, 09:40, 09:20, 09:30.
Now every owed slot joins the line before the live timer is armed. The same when the running
process falls behind: the slots due at once all join before the next live one.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import anyio
from support.running import runs_of
from support.waiting import wait_until

from fastapi_voltro_schedules import (
    RunStatus,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    Trigger,
    define_schedule,
)
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.store import RunRecord, create_store, new_run_id
from fastapi_voltro_schedules.testing import ManualClock

NAME = "rollup"


def at(hour: int, minute: int, second: float = 0) -> datetime:
    return datetime(2026, 6, 1, hour, minute, tzinfo=UTC) + timedelta(seconds=second)


async def seed_last_run(url: str, slot: datetime) -> None:
    await upgrade_to_head(url)
    store = create_store(url)
    try:
        await store.insert_runs([
            RunRecord(
                id=new_run_id(), name=NAME, scheduled_at=slot, status=RunStatus.SUCCEEDED,
                trigger=Trigger.SELF, fired_at=slot, finished_at=slot, replica_id="old",
            )
        ])  # fmt: skip
    finally:
        await store.dispose()


async def test_catch_up_slots_run_before_a_live_slot_in_slot_order(database_url: str) -> None:
    await seed_last_run(database_url, at(9, 0))
    ran: list[datetime] = []
    release = anyio.Event()

    async def rollup(ctx: ScheduleContext) -> None:
        ran.append(ctx.scheduled_at)
        await release.wait()

    schedule = define_schedule(
        name=NAME, cron="*/10 * * * *", timezone="UTC", on_overlap="queue", backfill="all",
        max_runtime_ms=7_200_000,
        handler=rollup,
    )  # fmt: skip
    clock = ManualClock(at(9, 35))
    config = SchedulingConfig(database_url=database_url, replica_id="pod-1")
    async with Scheduling([schedule], config=config, clock=clock).run() as scheduling:
        engine = scheduling.engine
        assert engine is not None

        async def admitted(slot: datetime) -> bool:
            rows = await runs_of(scheduling, NAME)
            waiting = engine.waiting_here()
            return any(r.scheduled_at == slot for r in [*rows, *waiting])

        await wait_until(lambda: ran == [at(9, 10)], what="09:10 running")
        await clock.advance((at(9, 40) - clock.now()).total_seconds())
        await wait_until(lambda: admitted(at(9, 40)), what="the live 09:40 in line")
        release.set()

        async def all_done() -> list[RunRecord] | None:
            rows = [r for r in await runs_of(scheduling, NAME) if r.replica_id != "old"]
            done = len(rows) == 4 and all(r.status is RunStatus.SUCCEEDED for r in rows)
            return rows if done else None

        await wait_until(all_done, what="the four slots run")
    assert ran == [at(9, 10), at(9, 20), at(9, 30), at(9, 40)]


async def test_slots_due_at_once_join_the_line_before_the_next_live_one(
    database_url: str,
) -> None:
    await upgrade_to_head(database_url)
    ran: list[datetime] = []
    release = anyio.Event()

    async def rollup(ctx: ScheduleContext) -> None:
        ran.append(ctx.scheduled_at)
        await release.wait()

    schedule = define_schedule(
        name=NAME, cron="*/10 * * * *", timezone="UTC", on_overlap="queue", backfill="all",
        max_runtime_ms=7_200_000,
        handler=rollup,
    )  # fmt: skip
    clock = ManualClock(at(9, 5))
    config = SchedulingConfig(database_url=database_url, replica_id="pod-1")
    async with Scheduling([schedule], config=config, clock=clock).run() as scheduling:
        engine = scheduling.engine
        assert engine is not None

        async def admitted(slot: datetime) -> bool:
            rows = await runs_of(scheduling, NAME)
            return any(r.scheduled_at == slot for r in [*rows, *engine.waiting_here()])

        await clock.advance((at(9, 10) - clock.now()).total_seconds())
        await wait_until(lambda: ran == [at(9, 10)], what="09:10 running")
        # the process falls behind: 09:20 and 09:30 come due at once
        await clock.advance((at(9, 35) - clock.now()).total_seconds())
        await wait_until(lambda: admitted(at(9, 30)), what="09:30 in line")
        await clock.advance((at(9, 40) - clock.now()).total_seconds())
        await wait_until(lambda: admitted(at(9, 40)), what="the live 09:40 in line")
        release.set()

        async def all_done() -> bool:
            rows = await runs_of(scheduling, NAME)
            return len(rows) == 4 and all(r.status is RunStatus.SUCCEEDED for r in rows)

        await wait_until(all_done, what="the four slots run")
    assert ran == [at(9, 10), at(9, 20), at(9, 30), at(9, 40)]
