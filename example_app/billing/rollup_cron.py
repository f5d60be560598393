"""Schedules of the billing area, discovered because the module name ends in ``_cron``."""

from __future__ import annotations

import logging

from fastapi_voltro_schedules import ScheduleContext, define_schedule

log = logging.getLogger("example_app")


@define_schedule(
    name="dailyDigest",
    cron="0 9 * * *",
    timezone="Europe/Berlin",
    backfill="latest",
    description="09:00 Berlin: send the digest.",
)
async def daily_digest(ctx: ScheduleContext) -> None:
    log.info("digest for slot %s", ctx.scheduled_at.isoformat())


@define_schedule(name="brokenExport", cron="*/15 * * * * *", timezone="UTC")
async def broken_export(ctx: ScheduleContext) -> None:
    raise RuntimeError("export target refused the connection")
