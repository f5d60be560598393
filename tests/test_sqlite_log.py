"""The SQLite write-ahead log is folded by the scheduler at its quiet moments, not by whichever
commit crosses SQLite's own threshold: that commit did the checkpoint inline, and at 1,000
firings a second every second or third herd's handlers all started 10–25 ms late (the steady
bench's p99). SQLite's own checkpoint stays, raised, as the backstop."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
from support.stores import open_store

from fastapi_voltro_schedules import ScheduleContext, Scheduling, SchedulingConfig, define_schedule
from fastapi_voltro_schedules.enums import CoordinationOutcome, RunStatus, Trigger
from fastapi_voltro_schedules.store import RunRecord, new_run_ids
from fastapi_voltro_schedules.store.engines import WAL_AUTOCHECKPOINT_PAGES
from fastapi_voltro_schedules.store.sql_connections import SQLConnections
from fastapi_voltro_schedules.testing import ManualClock

T0 = datetime(2026, 5, 28, 9, tzinfo=UTC)


def runs(count: int, at: datetime) -> list[RunRecord]:
    return [
        RunRecord(
            id=run_id,
            name=f"job-{i}",
            scheduled_at=at,
            status=RunStatus.RUNNING,
            trigger=Trigger.SELF,
            coordination_outcome=CoordinationOutcome.SINGLE,
            fired_at=at,
            replica_id="a",
        )
        for i, run_id in enumerate(new_run_ids(count))
    ]


async def test_checkpoint_folds_the_log_into_the_file(tmp_path: Path) -> None:
    path = tmp_path / "voltro.db"
    async with open_store(f"sqlite+aiosqlite:///{path}") as store:
        async with store.engine.connect() as conn:
            pages = (await conn.exec_driver_sql("PRAGMA wal_autocheckpoint")).scalar()
        assert pages == WAL_AUTOCHECKPOINT_PAGES  # SQLite's own: the backstop only
        await store.checkpoint()  # the schema, folded: the file's size from here
        before = os.path.getsize(path)
        for second in range(5):  # a few hundred pages: far below the backstop
            await store.insert_runs(runs(400, T0 + timedelta(seconds=second)))
        assert os.path.getsize(path) == before  # the commits left it all in the log
        assert os.path.getsize(f"{path}-wal") > 0

        await store.checkpoint()

        assert os.path.getsize(path) > before + 100_000  # 2,000 rows and their indexes
        assert len(await store.list_runs("job-0", limit=10)) == 5


async def test_checkpoint_is_nothing_on_the_memory_store() -> None:
    async with open_store("sqlite+aiosqlite://") as store:
        await store.insert_runs(runs(3, T0))
        await store.checkpoint()
        assert len(await store.list_runs("job-1")) == 1


async def test_the_engine_folds_the_log_once_a_herds_outcomes_are_written(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At most once per ``FOLD_EVERY_S``: when the timer goes to sleep with nothing due (after
    arming), then after the herd — with every one of its outcomes already in the ledger, so no
    write lands between the fold and the next herd's insert."""
    folds: list[list[RunStatus]] = []
    names = [f"h{i}" for i in range(5)]
    real = SQLConnections.checkpoint

    async def spy(self: SQLConnections) -> None:
        statuses = [run.status for name in names for run in await self.list_runs(name)]
        folds.append(statuses)
        await real(self)

    monkeypatch.setattr(SQLConnections, "checkpoint", spy)

    async def handler(ctx: ScheduleContext) -> None:
        await anyio.lowlevel.checkpoint()

    schedules = [
        define_schedule(name=name, cron="* * * * *", timezone="UTC", handler=handler)
        for name in names
    ]
    clock = ManualClock(datetime(2026, 6, 1, 11, 59, 30, tzinfo=UTC))
    config = SchedulingConfig(database_url=sqlite_url, replica_id="a")
    async with Scheduling(schedules, config=config, clock=clock).run():
        with anyio.fail_after(5):
            while not folds:
                await anyio.sleep(0.01)
        assert folds == [[]]  # armed, nothing ran yet
        await clock.advance(30)
        with anyio.fail_after(5):
            while len(folds) < 2:
                await anyio.sleep(0.01)
    assert folds[1] == [RunStatus.SUCCEEDED] * 5
