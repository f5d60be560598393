"""A test app for range backfill: ``uvicorn apps.backfill_app:app`` (``tests/`` on the path).

One schedule, ``hourly-sync`` (``0 * * * *`` UTC, ``trigger="self"``). Time is a
:class:`~fastapi_voltro_schedules.testing.ManualClock` frozen at ``BACKFILL_NOW``, so the live
timer never fires during a test: every row in the ledger comes from a range backfill.

The module-level ``scheduling`` is what ``voltro schedule backfill --app apps.backfill_app:app``
finds when it runs the range in-process against the same database.

Environment (read at import):

- ``VOLTRO_*``            the scheduler's config (``SchedulingConfig()``): database URL, tokens.
- ``BACKFILL_NOW``        the frozen clock, default ``2026-08-12T12:00:00+00:00``.
- ``BACKFILL_LOG``        every handler execution appends one JSON line there:
                          ``{"scheduledAt", "trigger", "runId", "firedAt"}``.
- ``BACKFILL_FAIL_AT``    ISO instant: the handler raises on that slot (recorded ``failed``).
- ``BACKFILL_SLEEP``      seconds each handler sleeps (real time), default ``0``.
- ``BACKFILL_HOLD``       a path: while a file is there, handlers wait (at most a hang's bound)
                          before they finish — a test that needs a range still running holds
                          it there, whatever the load.
"""

from __future__ import annotations

import json
import os
from datetime import datetime

import anyio
from fastapi import FastAPI
from support.waiting import HANG

from fastapi_voltro_schedules import (
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_schedule,
    schedules_router,
)
from fastapi_voltro_schedules.testing import ManualClock

NOW = datetime.fromisoformat(os.environ.get("BACKFILL_NOW", "2026-08-12T12:00:00+00:00"))
_LOG = os.environ.get("BACKFILL_LOG")
_FAIL_AT = (
    datetime.fromisoformat(os.environ["BACKFILL_FAIL_AT"])
    if os.environ.get("BACKFILL_FAIL_AT")
    else None
)
_SLEEP = float(os.environ.get("BACKFILL_SLEEP", "0"))
_HOLD = os.environ.get("BACKFILL_HOLD")


async def hourly_sync(ctx: ScheduleContext) -> None:
    if _LOG:
        line = {
            "scheduledAt": ctx.scheduled_at.isoformat(),
            "trigger": ctx.trigger.value,
            "runId": ctx.run_id,
            "firedAt": ctx.fired_at.isoformat(),
        }
        with open(_LOG, "a", encoding="utf-8") as handle:  # noqa: ASYNC230 — a test probe
            handle.write(json.dumps(line) + "\n")
    if _SLEEP:
        await anyio.sleep(_SLEEP)
    if _HOLD:
        with anyio.move_on_after(HANG):  # a bound for a test that died holding
            while os.path.exists(_HOLD):  # noqa: ASYNC240 — a stat, test-only
                await anyio.sleep(0.02)
    if _FAIL_AT is not None and ctx.scheduled_at == _FAIL_AT:
        raise RuntimeError("upstream refused this hour")


scheduling = Scheduling(
    [define_schedule(name="hourly-sync", cron="0 * * * *", timezone="UTC", handler=hourly_sync)],
    config=SchedulingConfig(),
    clock=ManualClock(NOW),
)
app = FastAPI(title="voltro range-backfill test app", lifespan=scheduling.lifespan)
app.include_router(schedules_router)
