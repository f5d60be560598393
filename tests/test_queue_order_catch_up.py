"""A ``queue`` line runs catch-up slots and live slots in ``scheduled_at`` order (issue 29
item 4; the seed orders the line by ``scheduledAt``).

Down from 09:00 until 09:35 with ``backfill="all"``: 09:10, 09:20 and 09:30 are owed. While
09:10 still runs, the live 09:40 falls due. Before, the catch-up admitted one slot after the
other finished, so 09:40 joined the line first and the handlers ran 09:10, 09:40, 09:20, 09:30.
Now every owed slot joins the line before the live timer is armed. The same when the running
process falls behind: the slots due at once all join before the next live one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import anyio
from support.running import runs_of, seed_last_run
from support.waiting import wait_until

from fastapi_voltro_schedules import (
    RunStatus,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_schedule,
)
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.testing import ManualClock

NAME = "rollup"


def at(hour: int, minute: int, second: float = 0) -> datetime:
    return datetime(2026, 6, 1, hour, minute, tzinfo=UTC) + timedelta(seconds=second)


class Rollups:
    """A ``queue``/``all`` schedule every 10 minutes whose runs are held until :meth:`drain`,
    booted at ``boot`` on the injected clock: which slots ran, in what order."""

    scheduling: Scheduling

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.ran: list[datetime] = []
        self.release = anyio.Event()

    async def handler(self, ctx: ScheduleContext) -> None:
        self.ran.append(ctx.scheduled_at)
        await self.release.wait()

    async def to(self, instant: datetime) -> None:
        await self.clock.advance((instant - self.clock.now()).total_seconds())

    async def admitted(self, slot: datetime) -> bool:
        """Whether ``slot`` has a row or waits in this process's line."""
        engine = self.scheduling.engine
        assert engine is not None
        rows = await runs_of(self.scheduling, NAME)
        return any(r.scheduled_at == slot for r in [*rows, *engine.waiting_here()])

    async def drain(self, count: int) -> list[datetime]:
        """Release the held runs; the slots run, in order, once ``count`` succeeded."""
        self.release.set()

        async def all_done() -> bool:
            rows = [r for r in await runs_of(self.scheduling, NAME) if r.replica_id != "old"]
            return len(rows) == count and all(r.status is RunStatus.SUCCEEDED for r in rows)

        await wait_until(all_done, what=f"the {count} slots run")
        return self.ran


@asynccontextmanager
async def rollups(url: str, boot: datetime) -> AsyncIterator[Rollups]:
    line = Rollups(ManualClock(boot))
    schedule = define_schedule(
        name=NAME, cron="*/10 * * * *", timezone="UTC", on_overlap="queue", backfill="all",
        max_runtime_ms=7_200_000, handler=line.handler,
    )  # fmt: skip
    config = SchedulingConfig(database_url=url, replica_id="pod-1")
    line.scheduling = scheduling = Scheduling([schedule], config=config, clock=line.clock)
    async with scheduling.run():
        yield line


async def test_catch_up_slots_run_before_a_live_slot_in_slot_order(database_url: str) -> None:
    await seed_last_run(database_url, NAME, at(9, 0))
    async with rollups(database_url, at(9, 35)) as line:
        await wait_until(lambda: line.ran == [at(9, 10)], what="09:10 running")
        await line.to(at(9, 40))
        await wait_until(lambda: line.admitted(at(9, 40)), what="the live 09:40 in line")
        ran = await line.drain(4)
    assert ran == [at(9, 10), at(9, 20), at(9, 30), at(9, 40)]


async def test_slots_due_at_once_join_the_line_before_the_next_live_one(
    database_url: str,
) -> None:
    await upgrade_to_head(database_url)
    async with rollups(database_url, at(9, 5)) as line:
        await line.to(at(9, 10))
        await wait_until(lambda: line.ran == [at(9, 10)], what="09:10 running")
        # the process falls behind: 09:20 and 09:30 come due at once
        await line.to(at(9, 35))
        await wait_until(lambda: line.admitted(at(9, 30)), what="09:30 in line")
        await line.to(at(9, 40))
        await wait_until(lambda: line.admitted(at(9, 40)), what="the live 09:40 in line")
        ran = await line.drain(4)
    assert ran == [at(9, 10), at(9, 20), at(9, 30), at(9, 40)]
