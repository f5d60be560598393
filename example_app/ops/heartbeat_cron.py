"""Operational schedules: a fast heartbeat, a sync handler, and a slow job that skips overlaps."""

from __future__ import annotations

import os
import time

import anyio

from fastapi_voltro_schedules import ScheduleContext, define_schedule


# EXAMPLE_HEARTBEAT_CRON lets the real-time test run it every second.
@define_schedule(
    name="heartbeat", cron=os.environ.get("EXAMPLE_HEARTBEAT_CRON", "*/5 * * * * *"), timezone="UTC"
)
async def heartbeat(ctx: ScheduleContext) -> None:
    """Every five seconds: proves the timer is alive."""


@define_schedule(name="syncCleanup", cron="*/20 * * * * *", timezone="UTC")
def sync_cleanup(ctx: ScheduleContext) -> None:
    """A plain ``def`` runs in a worker thread, so blocking calls don't stall the loop."""
    time.sleep(0.05)


@define_schedule(
    name="slowReindex",
    cron="*/10 * * * * *",
    timezone="UTC",
    on_overlap="skip",
    max_runtime_ms=60_000,
)
async def slow_reindex(ctx: ScheduleContext) -> None:
    """Takes longer than its period, so every other firing is recorded ``skipped``."""
    await anyio.sleep(15)
