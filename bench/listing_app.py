"""The app behind ``bench.listing``: ``VOLTRO_BENCH_SCHEDULES`` declared schedules
``tenant-000000`` … (yearly, ``0 3 1 1 *``: nothing fires in a window), on the ledger at
``VOLTRO_DATABASE_URL``, inspect token ``VOLTRO_INSPECT_TOKEN``."""

from __future__ import annotations

import os

from fastapi import FastAPI

from fastapi_voltro_schedules import (
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_schedule,
    schedules_router,
)


async def _noop(ctx: ScheduleContext) -> None:
    return None


COUNT = int(os.environ.get("VOLTRO_BENCH_SCHEDULES", "100000"))
schedules = [
    define_schedule(name=f"tenant-{i:06d}", cron="0 3 1 1 *", timezone="UTC", handler=_noop)
    for i in range(COUNT)
]
scheduling = Scheduling(schedules, config=SchedulingConfig(external_missed_policy="off"))
app = FastAPI(lifespan=scheduling.lifespan)
app.include_router(schedules_router)
