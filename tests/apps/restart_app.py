"""A test app for the CronJob script's resilience (tests/test_cronjob_script_away.py): one
``trigger="external"`` schedule, ``slow`` (every minute, UTC), whose handler takes
``SLOW_SECONDS`` (default 3) — long enough to restart the app while the script follows it;
and ``dayOff`` (every minute, UTC), which excludes the days listed in ``DAYS_OFF`` (comma
separated ISO dates): the script exits 0 on an excluded day's skipped slot."""

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


async def _day_off(ctx: ScheduleContext) -> None:
    raise AssertionError("an excluded day's slot never runs")


_DAYS_OFF = [d for d in os.environ.get("DAYS_OFF", "").split(",") if d]

scheduling = Scheduling(
    [
        define_schedule(
            name="slow", cron="* * * * *", timezone="UTC", trigger="external", handler=_slow
        ),
        define_schedule(
            name="dayOff",
            cron="* * * * *",
            timezone="UTC",
            trigger="external",
            handler=_day_off,
            exclude=_DAYS_OFF or None,
        ),
    ],
    config=SchedulingConfig(),
)
app = FastAPI(title="voltro CronJob script resilience app", lifespan=scheduling.lifespan)
app.include_router(schedules_router)
