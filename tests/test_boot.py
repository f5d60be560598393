"""Scheduling boot: schema handling per store, the coordination fallback warning, boot lines."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import create_async_engine

from fastapi_voltro_schedules import (
    ConfigurationError,
    Scheduling,
    SchedulingConfig,
    SchemaError,
    define_schedule,
)
from fastapi_voltro_schedules.leadership import FIRER_LOCK_SUFFIX
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.testing import ManualClock


async def noop(ctx: object) -> None:
    return None


def schedules() -> list[object]:
    return [
        define_schedule(name="digest", cron="0 9 * * *", timezone="Europe/Berlin", handler=noop),
        define_schedule(
            name="invoice", cron="0 3 1 * *", timezone="UTC", handler=noop, trigger="external"
        ),
    ]


async def test_sqlite_boot_migrates_and_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path}/boot.db"
    config = SchedulingConfig(database_url=url, coordination="advisoryLock")
    clock = ManualClock(datetime(2026, 6, 1, 12, tzinfo=UTC))
    scheduling = Scheduling(schedules(), config=config, clock=clock)  # type: ignore[arg-type]
    app = FastAPI()
    with caplog.at_level(logging.INFO, logger="fastapi_voltro_schedules"):
        async with scheduling.run(app):
            assert app.state.scheduling is scheduling
            assert scheduling.store is not None
            assert await scheduling.store.last_run("digest") is None
            async with scheduling.run(app):  # entering twice is a no-op
                pass
            assert scheduling.store is not None
    lines = [r.getMessage() for r in caplog.records]
    assert (
        "scheduling.coordination=advisoryLock needs a multi-instance SQL store — "
        "falling back to single (sqlite)"
    ) in lines
    assert "scheduler: starting  total=2 self=1 external=1 coordinator=single" in lines
    assert any("digest" in line and "next=2026-06-02T07:00:00.000Z" in line for line in lines)
    assert (tmp_path / "boot.db").exists()


async def test_server_database_without_schema_refuses_to_boot(postgres_url: str) -> None:
    scheduling = Scheduling(
        schedules(),  # type: ignore[arg-type]
        config=SchedulingConfig(database_url=postgres_url),
    )
    with pytest.raises(SchemaError, match="voltro migrate"):
        async with scheduling.run():
            pass


async def test_inherited_external_six_field_rejected_at_boot(tmp_path: Path) -> None:
    fast = define_schedule(name="tick", cron="*/5 * * * * *", timezone="UTC", handler=noop)
    config = SchedulingConfig(
        database_url=f"sqlite+aiosqlite:///{tmp_path}/x.db", trigger="external"
    )
    with pytest.raises(ConfigurationError) as info:
        async with Scheduling([fast], config=config).run():
            pass
    msg = str(info.value)
    assert '"tick"' in msg and "*/5 * * * * *" in msg and 'trigger="self"' in msg


async def test_an_error_inside_the_block_leaves_as_itself(tmp_path: Path) -> None:
    config = SchedulingConfig(database_url=f"sqlite+aiosqlite:///{tmp_path}/x.db")
    for arm in (True, False):
        with pytest.raises(KeyError, match="mine"):
            async with Scheduling(schedules(), config=config).run(arm=arm):  # type: ignore[arg-type]
                raise KeyError("mine")


async def test_a_shared_sqlite_engine_takes_the_firer_lock_of_its_own_file(tmp_path: Path) -> None:
    # config.database_url is ignored with Scheduling(engine=...): the one-firer lock must guard
    # the engine's file, not the configured one.
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/shared.db")
    config = SchedulingConfig(database_url=f"sqlite+aiosqlite:///{tmp_path}/configured.db")
    try:
        scheduling = Scheduling(schedules(), config=config, engine=engine)  # type: ignore[arg-type]
        async with scheduling.run(FastAPI()):
            assert scheduling.fires_here
            assert (tmp_path / f"shared.db{FIRER_LOCK_SUFFIX}").exists()
            assert not (tmp_path / f"configured.db{FIRER_LOCK_SUFFIX}").exists()
    finally:
        await engine.dispose()


async def test_a_shared_server_engine_takes_no_sqlite_firer_lock(
    postgres_url: str, tmp_path: Path
) -> None:
    await upgrade_to_head(postgres_url)
    engine = create_async_engine(postgres_url)
    config = SchedulingConfig(database_url=f"sqlite+aiosqlite:///{tmp_path}/configured.db")
    try:
        scheduling = Scheduling(schedules(), config=config, engine=engine)  # type: ignore[arg-type]
        async with scheduling.run(FastAPI()):
            assert scheduling.fires_here
            # no lock beside a file nobody opens
            assert not (tmp_path / f"configured.db{FIRER_LOCK_SUFFIX}").exists()
    finally:
        await engine.dispose()


async def test_a_boot_of_many_schedules_lists_the_first_200_and_counts_the_rest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A line per schedule is the boot log's promise up to 200; past that the rest are
    counted (100,000 lines were noise in the deploy's log and seconds of the boot), and the
    counts line still holds every one."""
    url = f"sqlite+aiosqlite:///{tmp_path}/many.db"
    many = [
        define_schedule(name=f"tenant-{i:03}", cron="0 9 * * *", timezone="UTC", handler=noop)
        for i in range(203)
    ]
    clock = ManualClock(datetime(2026, 6, 1, 12, tzinfo=UTC))
    scheduling = Scheduling(many, config=SchedulingConfig(database_url=url), clock=clock)
    with caplog.at_level(logging.INFO, logger="fastapi_voltro_schedules"):
        async with scheduling.run():
            pass
    lines = [r.getMessage() for r in caplog.records]
    assert "scheduler: starting  total=203 self=203 external=0 coordinator=single" in lines
    listed = [line for line in lines if line.startswith("scheduler:   tenant-")]
    assert len(listed) == 200 and listed[0].startswith("scheduler:   tenant-000  ")
    assert "scheduler:   … and 3 more (`voltro schedule list` shows every one)" in lines
    assert "schedule: definitions recorded  new=203" in lines
