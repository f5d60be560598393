"""A test app mounting ``schedules_router`` under a prefix (``/api``), for the generated
manifests' URLs (tests/test_manifest_prefix.py)."""

from __future__ import annotations

from fastapi import FastAPI

from fastapi_voltro_schedules import (
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_schedule,
    schedules_router,
)


async def _work(ctx: ScheduleContext) -> None:
    return None


scheduling = Scheduling(
    [
        define_schedule(
            name="nightly", cron="0 2 * * *", timezone="UTC", trigger="external", handler=_work
        )
    ],
    config=SchedulingConfig(),
)
app = FastAPI(lifespan=scheduling.lifespan)
app.include_router(schedules_router, prefix="/api")
