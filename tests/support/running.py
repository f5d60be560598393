"""A scheduler on an injected clock and a SQLite ledger, the rows it wrote, and its routes
served in-process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import httpx
from fastapi import FastAPI

from fastapi_voltro_schedules import (
    RunStatus,
    Schedule,
    Scheduling,
    SchedulingConfig,
    Trigger,
    schedules_router,
)
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.store import RunRecord, create_store, new_run_id
from fastapi_voltro_schedules.testing import ManualClock


@asynccontextmanager
async def running(
    schedules: list[Schedule], sqlite_url: str, clock: ManualClock, **config: Any
) -> AsyncIterator[Scheduling]:
    """``schedules`` booted and armed as replica ``replica-a``; ``config``: more
    :class:`SchedulingConfig` fields."""
    cfg = SchedulingConfig(database_url=sqlite_url, replica_id="replica-a", **config)
    scheduling = Scheduling(schedules, config=cfg, clock=clock)
    async with scheduling.run():
        yield scheduling


async def seed_last_run(url: str, name: str, slot: datetime) -> None:
    """Migrate ``url`` and record that ``name`` last ran, and succeeded, at ``slot`` (by an
    ``old`` replica): the ledger a boot catches up from."""
    await upgrade_to_head(url)
    store = create_store(url)
    try:
        await store.insert_runs([
            RunRecord(
                id=new_run_id(), name=name, scheduled_at=slot, status=RunStatus.SUCCEEDED,
                trigger=Trigger.SELF, fired_at=slot, finished_at=slot, replica_id="old",
            )
        ])  # fmt: skip
    finally:
        await store.dispose()


async def runs_of(scheduling: Scheduling, name: str) -> list[RunRecord]:
    """Every row of ``name``, oldest slot first (rows of one slot in id order)."""
    assert scheduling.store is not None
    found = await scheduling.store.list_runs(name, limit=1000)
    return sorted(found, key=lambda r: (r.scheduled_at, r.id))


@asynccontextmanager
async def served(scheduling: Scheduling) -> AsyncIterator[httpx.AsyncClient]:
    """``scheduling`` booted with the package's routes, and a client on them (in-process, over
    ASGI). A context manager, not a fixture: the scheduler's task group must be entered and
    left in the same task, and pytest-asyncio tears fixtures down in another."""
    app = FastAPI()
    app.include_router(schedules_router)
    async with scheduling.run(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield client
