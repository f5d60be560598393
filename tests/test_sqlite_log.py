"""The SQLite ledger's file and log: what the scheduler does with them while it runs.

The write-ahead log is folded by the scheduler at its quiet moments, not by whichever
commit crosses SQLite's own threshold: that commit did the checkpoint inline, and at 1,000
firings a second every second or third herd's handlers all started 10–25 ms late (the steady
bench's p99). SQLite's own checkpoint stays, raised, as the backstop. And the pauses copy
asks the files, not the database, whether anything was written since its last read."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
from support.stores import open_store
from support.waiting import wait_until

from fastapi_voltro_schedules import ScheduleContext, Scheduling, SchedulingConfig, define_schedule
from fastapi_voltro_schedules import pauses as pauses_module
from fastapi_voltro_schedules.clock import SystemClock
from fastapi_voltro_schedules.enums import CoordinationOutcome, RunStatus, Trigger
from fastapi_voltro_schedules.pauses import Pauses
from fastapi_voltro_schedules.store import PauseRecord, RunRecord, new_run_ids
from fastapi_voltro_schedules.store.engines import WAL_AUTOCHECKPOINT_PAGES
from fastapi_voltro_schedules.store.sql_connections import SQLConnections
from fastapi_voltro_schedules.testing import ManualClock

T0 = datetime(2026, 5, 28, 9, tzinfo=UTC)


def size(path: Path | str) -> int:
    return os.path.getsize(path)


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
        before = size(path)
        for second in range(5):  # a few hundred pages: far below the backstop
            await store.insert_runs(runs(400, T0 + timedelta(seconds=second)))
        assert size(path) == before  # the commits left it all in the log
        assert size(f"{path}-wal") > 0

        await store.checkpoint()

        assert size(path) > before + 100_000  # 2,000 rows and their indexes
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
        await real(self)
        # Told once the fold is over (the engine folds one at a time): told before, the test
        # moved the clock while the first fold still ran, and on a busy box the herd settled
        # then — its fold was skipped as one already running, and nothing asked again.
        folds.append(statuses)

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
        await wait_until(lambda: folds, what="the fold after arming")
        assert folds == [[]]  # armed, nothing ran yet
        await clock.advance(30)
        await wait_until(lambda: len(folds) >= 2, what="the fold after the herd")
    assert folds[1] == [RunStatus.SUCCEEDED] * 5


async def test_the_pauses_copy_reads_the_table_only_after_a_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The once-a-second refresh of the pauses copy asks the file, not the database, whether
    anything was written: an idle ledger is not read at all, and a pause written by another
    process (another engine on the same file) is still seen at the next refresh."""
    monkeypatch.setattr(pauses_module, "REFRESH_SECONDS", 0.05)
    url = f"sqlite+aiosqlite:///{tmp_path / 'voltro.db'}"
    async with open_store(url) as ours, open_store(url) as theirs:
        pauses = Pauses(ours, SystemClock())
        reads = 0
        real = ours.pauses

        async def counted() -> list[PauseRecord]:
            nonlocal reads
            reads += 1
            return await real()

        monkeypatch.setattr(ours, "pauses", counted)
        # Counted in checks, not seconds: on a busy machine a tenth of a second may hold no
        # check at all, and a check is what could read.
        checks = 0
        real_check = pauses._check

        async def counted_check() -> None:
            nonlocal checks
            await real_check()
            checks += 1

        monkeypatch.setattr(pauses, "_check", counted_check)
        async with anyio.create_task_group() as tg:
            await tg.start(pauses.run)
            # The schema's writes are read until they are a refresh older than a read; from
            # then on the copy trusts the file's stamp.
            await wait_until(lambda: pauses._current_for is not None, what="a trusted stamp")
            settled, checked = reads, checks
            await wait_until(lambda: checks >= checked + 10, what="ten more checks")
            assert reads == settled  # ten checks with nothing written read nothing
            assert not pauses.is_paused("job-0")

            await theirs.pause("job-0", paused_at=T0, paused_by="operator", reason="broken")
            await wait_until(lambda: pauses.is_paused("job-0"), what="the pause seen")
            assert reads > settled
            tg.cancel_scope.cancel()


async def test_a_pause_written_elsewhere_holds_the_next_instant_without_a_wake_a_second(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a SQLite ledger the background check waits for the next instant instead of waking
    every second; the timer looks at the table itself before it fires, so a pause written by
    another process (another engine on the file) still holds the slot."""
    monkeypatch.setattr(pauses_module, "REFRESH_SECONDS", 0.05)
    fired: list[str] = []

    async def handler(ctx: ScheduleContext) -> None:
        fired.append(ctx.name)

    schedules = [
        define_schedule(name=name, cron="* * * * *", timezone="UTC", handler=handler)
        for name in ("held", "free")
    ]
    clock = ManualClock(datetime(2026, 6, 1, 11, 59, 30, tzinfo=UTC))
    config = SchedulingConfig(database_url=sqlite_url, replica_id="a")
    scheduling = Scheduling(schedules, config=config, clock=clock)
    async with scheduling.run(), open_store(sqlite_url) as other:
        pauses = scheduling.pauses
        assert isinstance(pauses, Pauses)
        # 30 s to the instant: the check sleeps until just before it (the cap is 30 s).
        assert pauses._until_next_check() == pytest.approx(29.95, abs=0.05)
        await other.pause("held", paused_at=clock.now(), paused_by="operator", reason=None)
        await anyio.sleep(0.2)  # the copy is older than a refresh now; nobody looked
        assert not pauses.is_paused("held")
        await clock.advance(30)
        await wait_until(lambda: fired, what="the free schedule's firing")
        # One pass of the timer decides the whole instant and writes its rows before any
        # handler starts: with "free" running, a firing of "held" would have a row by now.
        assert await other.list_runs("held") == []
        assert fired == ["free"]
        assert pauses.is_paused("held")
