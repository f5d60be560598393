"""A test app whose firings are handed to a job engine: ``uvicorn apps.handoff_app:app``
(``tests/`` on the path). Several processes run it as replicas of one deployment.

Time is a :class:`~fastapi_voltro_schedules.testing.ManualClock` moved over HTTP by the test
(``POST /_test/clock?to=<ISO>``, ``POST /_test/clock/advance?seconds=``), as in
``apps.external_app``: the test decides which slot the arrivals are for, and when a silent row
reads dead.

Environment:

- ``VOLTRO_*``         the scheduler's config (``SchedulingConfig()``).
- ``HANDOFF_ENGINE``   ``arq``, ``procrastinate`` or ``celery`` (``apps.handoff_celery``).
- ``HANDOFF_REDIS_URL``, ``HANDOFF_QUEUE``  where the arq jobs go.
- ``HANDOFF_PROCRASTINATE_DSN``  the ledger's database, for procrastinate
  (``apps.handoff_procrastinate``).
- ``HANDOFF_CLOCK_START``  the clock at boot, default ``2026-03-04T08:30:00+00:00``.

Schedule: ``report`` (``* * * * *`` UTC, ``trigger="external"``), a ``workflow=`` target that
hands each slot off as task ``handoff_job`` (``tests/apps/handoff_worker.py``) with the payload
``{"slot": <ISO>, "fail": <whether the job should raise>}``: the job fails for slots whose
minute is 3 mod 4.
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
    WorkflowTarget,
    define_schedule,
    schedules_router,
)
from fastapi_voltro_schedules.clock import iso_z
from fastapi_voltro_schedules.handoff import Handoff, JobEngine
from fastapi_voltro_schedules.testing import ManualClock

config = SchedulingConfig()
clock = ManualClock(
    datetime.fromisoformat(os.environ.get("HANDOFF_CLOCK_START", "2026-03-04T08:30:00+00:00"))
)


def _engine() -> JobEngine:
    kind = os.environ.get("HANDOFF_ENGINE", "arq")
    if kind == "arq":
        from fastapi_voltro_schedules.handoff.arq import ArqEngine

        return ArqEngine.from_url(
            os.environ["HANDOFF_REDIS_URL"], queue_name=os.environ["HANDOFF_QUEUE"]
        )
    if kind == "procrastinate":
        from apps.handoff_procrastinate import app as jobs

        from fastapi_voltro_schedules.handoff.procrastinate import ProcrastinateEngine

        return ProcrastinateEngine(jobs)
    if kind == "celery":
        from apps.handoff_celery import app as jobs

        from fastapi_voltro_schedules.handoff.celery import CeleryEngine

        return CeleryEngine(jobs)
    raise RuntimeError(f"HANDOFF_ENGINE={kind!r}: expected arq, procrastinate or celery")


def payload(ctx: ScheduleContext) -> dict[str, object]:
    return {"slot": iso_z(ctx.scheduled_at), "fail": ctx.scheduled_at.minute % 4 == 3}


report = define_schedule(
    name="report",
    cron="* * * * *",
    timezone="UTC",
    trigger="external",
    workflow=WorkflowTarget(name="handoff_job", payload=payload),
)

scheduling = Scheduling(
    [report], config=config, clock=clock, workflows=Handoff(_engine(), poll_interval=0.05)
)
app = FastAPI(title="voltro hand-off test app", lifespan=scheduling.lifespan)
app.include_router(schedules_router)


@app.post("/_test/clock")
async def set_clock(to: str) -> dict[str, str]:
    clock.set(datetime.fromisoformat(to))
    await anyio.lowlevel.checkpoint()
    return {"now": clock.now().isoformat()}


@app.post("/_test/clock/advance")
async def advance_clock(seconds: float) -> dict[str, str]:
    await clock.advance(seconds)
    return {"now": clock.now().isoformat()}
