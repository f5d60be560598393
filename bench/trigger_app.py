"""The app behind ``bench.trigger_rps``: one external schedule and a bare route beside it."""

from __future__ import annotations

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


hourly = define_schedule(
    name="hourly", cron="0 * * * *", timezone="UTC", handler=_noop, trigger="external"
)
scheduling = Scheduling([hourly], config=SchedulingConfig(external_missed_policy="off"))
app = FastAPI(lifespan=scheduling.lifespan)
app.include_router(schedules_router)


@app.post("/bare")
async def bare() -> dict[str, bool]:
    return {"ok": True}
