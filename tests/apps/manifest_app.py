"""A test app for ``voltro schedule-manifest``: external schedules across dialect corners, run
by uvicorn (``tests/`` on the path) with a ManualClock moved by ``POST /_test/clock``.

Environment as ``apps.external_app`` (``VOLTRO_*``, ``EXT_CLOCK_START``).

Schedules (all ``trigger="external"`` except ``selfJob``): ``hourly`` (``0 * * * *`` UTC),
``failing`` (``30 9 * * *`` UTC, raises), ``nightlyNewYork`` (``30 1 * * *`` America/New_York:
its 01:30 repeats on the fall-back night), ``sundayReport`` (``0 6 * * 7``: day-of-week 7,
which Kubernetes rejects), ``oddWeekdays`` (``0 8 * * 1/2``: Sunday included here, not in
robfig), ``aVeryLongScheduleNameThatCannotFitIntoAKubernetesCronJobName`` (hash-suffixed).
"""

from __future__ import annotations

import os
from datetime import datetime

import anyio.lowlevel
from fastapi import FastAPI

from fastapi_voltro_schedules import (
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_schedule,
    schedules_router,
)
from fastapi_voltro_schedules.testing import ManualClock

config = SchedulingConfig()
clock = ManualClock(
    datetime.fromisoformat(os.environ.get("EXT_CLOCK_START", "2026-03-04T08:30:00+00:00"))
)


async def _work(ctx: ScheduleContext) -> None:
    await anyio.sleep(0.2)


async def _failing(ctx: ScheduleContext) -> None:
    raise RuntimeError("boom")


schedules = [
    define_schedule(
        name="hourly",
        cron="0 * * * *",
        timezone="UTC",
        trigger="external",
        handler=_work,
        description="Every hour, on the hour",
    ),
    define_schedule(
        name="failing", cron="30 9 * * *", timezone="UTC", trigger="external", handler=_failing
    ),
    define_schedule(
        name="nightlyNewYork",
        cron="30 1 * * *",
        timezone="America/New_York",
        trigger="external",
        handler=_work,
        max_runtime_ms=600_000,
    ),
    define_schedule(
        name="sundayReport",
        cron="0 6 * * 7",
        timezone="Europe/Berlin",
        trigger="external",
        handler=_work,
    ),
    define_schedule(
        name="oddWeekdays",
        cron="0 8 * * 1/2",
        timezone="UTC",
        trigger="external",
        handler=_work,
    ),
    define_schedule(
        name="aVeryLongScheduleNameThatCannotFitIntoAKubernetesCronJobName",
        cron="15 4 1 * *",
        timezone="UTC",
        trigger="external",
        handler=_work,
    ),
    define_schedule(
        name="selfJob", cron="0 3 * * *", timezone="UTC", trigger="self", handler=_work
    ),
]

scheduling = Scheduling(schedules, config=config, clock=clock)
app = FastAPI(title="voltro schedule-manifest test app", lifespan=scheduling.lifespan)
app.include_router(schedules_router)


@app.post("/_test/clock")
async def set_clock(to: str) -> dict[str, str]:
    clock.set(datetime.fromisoformat(to))
    await anyio.lowlevel.checkpoint()
    return {"now": clock.now().isoformat()}
