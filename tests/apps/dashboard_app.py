"""A test app for the dashboard: ``uvicorn apps.dashboard_app:app`` (``tests/`` on the path).

Real time (the system clock), so the browser sees real runs land and countdowns tick:

- ``heartbeat`` (``*/2 * * * * *``, succeeds) and ``flaky`` (``*/3 * * * * *``, raises
  ``ConnectionRefusedError``): the succeeded and failed runs of the timeline;
- ``dailyDigest`` (``0 9 * * *`` Europe/Berlin) and ``invoice`` (external, monthly): schedules
  with no runs, for the empty states and an hours-long countdown.

Environment: the scheduler's ``VOLTRO_*`` config (database URL, tokens, replica id).
"""

from __future__ import annotations

from fastapi import FastAPI

from fastapi_voltro_schedules import (
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_schedule,
    schedules_router,
)


async def _beat(ctx: ScheduleContext) -> None:
    return None


async def _send(ctx: ScheduleContext) -> None:
    raise ConnectionRefusedError("smtp.internal:25 refused the connection")


schedules = [
    define_schedule(
        name="heartbeat",
        cron="*/2 * * * * *",
        timezone="UTC",
        description="Touches the health table every two seconds.",
        handler=_beat,
    ),
    define_schedule(
        name="flaky",
        cron="*/3 * * * * *",
        timezone="UTC",
        description="Sends queued mail; the SMTP relay is down.",
        handler=_send,
    ),
    define_schedule(
        name="dailyDigest",
        cron="0 9 * * *",
        timezone="Europe/Berlin",
        description="The morning digest for opted-in users.",
        handler=_beat,
    ),
    define_schedule(
        name="invoice",
        cron="0 3 1 * *",
        timezone="UTC",
        trigger="external",
        description="Monthly invoices, fired by the platform's CronJob.",
        handler=_beat,
    ),
]

scheduling = Scheduling(schedules, config=SchedulingConfig())
app = FastAPI(title="voltro dashboard test app", lifespan=scheduling.lifespan)
app.include_router(schedules_router)
