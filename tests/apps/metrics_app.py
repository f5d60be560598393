"""A test app for ``/metrics`` over real HTTP: ``uvicorn apps.metrics_app:app``.

Its self-triggered schedules fire a known sequence in the seconds after import, then nothing
for about a minute (each cron names a few seconds of the minute), so a scrape taken after the
sequence can be compared with the ledger row for row:

- ``ok``: 3 slots, each succeeds;
- ``boom``: 2 slots, each raises ``ValueError`` (``failed``);
- ``slow``: 2 slots, ``on_overlap="skip"``; the first sleeps through the second (``succeeded``,
  then ``skipped``);
- ``late``: fires 30 s after the others; ``backfill="skip"``, so a ledger seeded with an old row
  of it gets ``missed`` rows at boot.

``VOLTRO_*`` configure the scheduler (``VOLTRO_DATABASE_URL``, the tokens).
"""

from __future__ import annotations

import time

import anyio
from fastapi import FastAPI

from fastapi_voltro_schedules import (
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_schedule,
    schedules_router,
)

FIRST = (int(time.time()) + 3) % 60  # boot takes well under 3 s


def seconds(*offsets: int) -> str:
    return ",".join(str((FIRST + o) % 60) for o in offsets) + " * * * * *"


def kaboom() -> None:
    raise ValueError("the handler's own defect")


async def ok(ctx: ScheduleContext) -> None:
    return None


async def boom(ctx: ScheduleContext) -> None:
    kaboom()


async def slow(ctx: ScheduleContext) -> None:
    await anyio.sleep(1.6)


schedules = [
    define_schedule(name="ok", cron=seconds(0, 1, 2), timezone="UTC", handler=ok),
    define_schedule(name="boom", cron=seconds(0, 1), timezone="UTC", handler=boom),
    define_schedule(
        name="slow", cron=seconds(0, 1), timezone="UTC", handler=slow, on_overlap="skip"
    ),
    define_schedule(name="late", cron=seconds(30), timezone="UTC", handler=ok, backfill="skip"),
]

scheduling = Scheduling(schedules, config=SchedulingConfig())
app = FastAPI(title="voltro metrics test app", lifespan=scheduling.lifespan)
app.include_router(schedules_router)
