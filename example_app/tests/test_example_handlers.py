"""Tests of the example app's handlers — copy this folder as the start of your own.

No server, no file: the app's database is an in-memory SQLite engine put where the app's
lifespan puts its own (``app.state.db``), and ``make_context`` / ``run_once`` come from
``fastapi_voltro_schedules.testing`` (docs/testing.md).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from fastapi import FastAPI
from sqlalchemy import select
from sqlalchemy.ext.asyncio import create_async_engine

from example_app.billing.rollup_cron import broken_export, daily_digest
from example_app.db import create_tables, digests
from fastapi_voltro_schedules import RunStatus
from fastapi_voltro_schedules.testing import make_context, run_once

SLOT = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)  # 09:00 in Berlin


@pytest.fixture
async def app() -> AsyncIterator[FastAPI]:
    app = FastAPI()
    app.state.db = create_async_engine("sqlite+aiosqlite:///:memory:")
    await create_tables(app.state.db)
    yield app
    await app.state.db.dispose()


async def sent(app: FastAPI) -> list[tuple[datetime, str]]:
    async with app.state.db.connect() as conn:
        rows = (await conn.execute(select(digests.c.slot, digests.c.sent_by))).all()
    return [(slot.replace(tzinfo=UTC), by) for slot, by in rows]


async def test_the_digest_records_its_slot_once(app: FastAPI) -> None:
    await daily_digest(make_context(daily_digest, at=SLOT, app=app, run_id="sr_first"))
    await daily_digest(make_context(daily_digest, at=SLOT, app=app, run_id="sr_again"))
    assert await sent(app) == [(SLOT, "sr_first")]  # a second firing of the slot sends nothing


async def test_the_digest_through_the_runner_succeeds(app: FastAPI) -> None:
    run = await run_once(daily_digest, at=SLOT, app=app)
    assert run.status is RunStatus.SUCCEEDED
    assert await sent(app) == [(SLOT, run.id)]


async def test_the_export_is_quiet_unless_asked_to_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    at = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
    assert (await run_once(broken_export, at=at)).status is RunStatus.SUCCEEDED
    monkeypatch.setenv("EXAMPLE_EXPORT_FAIL", "1")
    run = await run_once(broken_export, at=at)
    assert (run.status, run.error_tag) == (RunStatus.FAILED, "RuntimeError")
    assert run.error_message == "export target refused the connection"
