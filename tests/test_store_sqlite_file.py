"""The SQLite ledger file deleted (or replaced) under a running app: the store notices before
the next statement and fails closed — StoreUnavailableError naming the path and the remedy,
logged at ERROR — instead of writing into the unlinked file and then creating an empty one."""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from support.stores import open_store

from fastapi_voltro_schedules import (
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_schedule,
    schedules_router,
)
from fastapi_voltro_schedules.enums import CoordinationOutcome, RunStatus, Trigger
from fastapi_voltro_schedules.errors import StoreUnavailableError
from fastapi_voltro_schedules.store import RunRecord, new_run_id
from fastapi_voltro_schedules.testing import ManualClock

T0 = datetime(2026, 5, 28, 9, tzinfo=UTC)


def run() -> RunRecord:
    return RunRecord(
        id=new_run_id(),
        name="job",
        scheduled_at=T0,
        status=RunStatus.SUCCEEDED,
        trigger=Trigger.SELF,
        coordination_outcome=CoordinationOutcome.SINGLE,
    )


async def test_deleted_file_fails_every_call_and_is_not_recreated(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "voltro.db"
    async with open_store(f"sqlite+aiosqlite:///{path}") as store:
        await store.insert_run(run())
        assert len(await store.list_runs("job")) == 1
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(f"{path}{suffix}")

        with caplog.at_level(logging.ERROR, "fastapi_voltro_schedules.store"):
            with pytest.raises(StoreUnavailableError) as raised:
                await store.insert_run(run())
            message = str(raised.value)
            assert str(path) in message
            assert "deleted or replaced" in message and "the file is gone" in message
            assert "voltro migrate" in message  # the remedy
            # reads fail too, and no new empty file appears at the path
            with pytest.raises(StoreUnavailableError, match="deleted or replaced"):
                await store.list_runs("job")
            with pytest.raises(StoreUnavailableError):
                await store.claim("job@2026-05-28T09:00:00", "r1", T0)
        assert not path.exists()
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1 and str(path) in errors[0].getMessage()  # once, not per call


async def test_replaced_file_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "voltro.db"
    async with open_store(f"sqlite+aiosqlite:///{path}") as store:
        await store.insert_run(run())
        other = tmp_path / "other.db"
        sqlite3.connect(other).close()
        os.replace(other, path)  # a restore of the wrong file, or a deploy that recreated it
        with pytest.raises(StoreUnavailableError, match="another file is in its place"):
            await store.get_run("sr_x")


async def test_untouched_file_keeps_working(tmp_path: Path) -> None:
    path = tmp_path / "voltro.db"
    async with open_store(f"sqlite+aiosqlite:///{path}") as store:
        for _ in range(3):
            await store.insert_run(run())
        assert len(await store.list_runs("job")) == 3


async def test_routes_answer_503_once_the_file_is_gone(tmp_path: Path) -> None:
    async def noop(ctx: ScheduleContext) -> None:
        return None

    path = tmp_path / "voltro.db"
    schedule = define_schedule(name="job", cron="0 0 1 1 *", timezone="UTC", handler=noop)
    config = SchedulingConfig(
        database_url=f"sqlite+aiosqlite:///{path}",
        replica_id="r1",
        inspect_token="inspect-secret-0123456789",
    )
    scheduling = Scheduling([schedule], config=config, clock=ManualClock(T0))
    app = FastAPI()
    app.include_router(schedules_router)
    auth = {"Authorization": "Bearer inspect-secret-0123456789"}
    async with scheduling.run(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            ok = await client.get("/_voltro/inspect/schedules", headers=auth)
            assert ok.status_code == 200, ok.text
            os.remove(path)
            listed = await client.get("/_voltro/inspect/schedules", headers=auth)
            fired = await client.post("/_voltro/inspect/schedules/job/fire", headers=auth)
    for answer in (listed, fired):
        assert answer.status_code == 503, answer.text
    assert not path.exists()
