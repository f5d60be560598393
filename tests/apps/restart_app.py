"""A test app for the CronJob script's resilience (tests/test_cronjob_script_away.py): one
``trigger="external"`` schedule, ``slow`` (every minute, UTC), whose handler takes
``SLOW_SECONDS`` (default 3) — long enough to restart the app while the script follows it."""

from __future__ import annotations

import os

import anyio
from fastapi import FastAPI

from fastapi_voltro_schedules import (
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_schedule,
    schedules_router,
)


async def _slow(ctx: ScheduleContext) -> None:
    await anyio.sleep(float(os.environ.get("SLOW_SECONDS", "3")))


scheduling = Scheduling(
    [
        define_schedule(
            name="slow", cron="* * * * *", timezone="UTC", trigger="external", handler=_slow
        )
    ],
    config=SchedulingConfig(),
)
app = FastAPI(title="voltro CronJob script resilience app", lifespan=scheduling.lifespan)
app.include_router(schedules_router)
