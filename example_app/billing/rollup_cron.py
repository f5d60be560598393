"""Schedules of the billing area, discovered because the module name ends in ``_cron``."""

from __future__ import annotations

import logging
import os

from sqlalchemy import func, select

from fastapi_voltro_schedules import ScheduleContext, define_schedule

from ..db import digests

log = logging.getLogger("example_app")


@define_schedule(
    name="dailyDigest",
    cron="0 9 * * *",
    timezone="Europe/Berlin",
    backfill="latest",
    description="09:00 Berlin: send the digest.",
)
async def daily_digest(ctx: ScheduleContext) -> None:
    """Uses the app's own database through ``ctx.app`` and records the slot it sent."""
    assert ctx.app is not None, "runs inside the app (or make_context(..., app=app) in a test)"
    engine = ctx.app.state.db
    async with engine.begin() as conn:
        # Idempotent per slot: a Run now or a backfill of the same day finds the row there.
        done = await conn.scalar(select(func.count()).where(digests.c.slot == ctx.scheduled_at))
        if not done:
            await conn.execute(
                digests.insert().values(slot=ctx.scheduled_at, recipients=3, sent_by=ctx.run_id)
            )
    log.info("digest for slot %s", ctx.scheduled_at.isoformat())


@define_schedule(
    name="brokenExport",
    cron="0 */4 * * *",
    timezone="UTC",
    description="Every 4 hours: the export demo. Set EXAMPLE_EXPORT_FAIL=1 to see a failure "
    "recorded (with its traceback in the log).",
)
async def broken_export(ctx: ScheduleContext) -> None:
    # Quiet by default: a demo that failed every 15 s would teach alert fatigue.
    if os.environ.get("EXAMPLE_EXPORT_FAIL") == "1":
        raise RuntimeError("export target refused the connection")
    log.info("export for slot %s", ctx.scheduled_at.isoformat())
