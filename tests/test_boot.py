"""Scheduling boot: schema handling per store, the coordination fallback warning, boot lines."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi import FastAPI

from fastapi_voltro_schedules import (
    ConfigurationError,
    Scheduling,
    SchedulingConfig,
    SchemaError,
    define_schedule,
)
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
