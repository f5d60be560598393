"""A scheduler on an injected clock and a SQLite ledger, and the rows it wrote."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi_voltro_schedules import Schedule, Scheduling, SchedulingConfig
from fastapi_voltro_schedules.store import RunRecord
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


async def runs_of(scheduling: Scheduling, name: str) -> list[RunRecord]:
    """Every row of ``name``, oldest slot first."""
    assert scheduling.store is not None
    return sorted(await scheduling.store.list_runs(name, limit=1000), key=lambda r: r.scheduled_at)
