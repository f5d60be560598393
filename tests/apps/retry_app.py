"""A test app for retries across replicas: ``uvicorn apps.retry_app:app`` (``tests/`` on the
path). Everything comes from the environment, so several processes run it as replicas of one
deployment (``VOLTRO_*``: the scheduler's config).

- ``flaky``    cron ``RETRY_FLAKY_CRON`` (default every 20 s); its first two attempts of every
  slot fail, the third succeeds; ``RetryPolicy(attempts=3, backoff_ms=RETRY_BACKOFF_MS)``
  (default 3000).
- ``stubborn`` cron ``RETRY_STUBBORN_CRON`` (default every 20 s); every attempt fails;
  ``RetryPolicy(attempts=5, backoff_ms=RETRY_STUBBORN_BACKOFF_MS)`` (default 8000): its second
  retry would wait past the next slot, so each slot ends ``retry-window-closed``.
- ``RETRY_MARKER_DIR``: every attempt creates one empty file there *before* it does anything,
  ``<name>__<slot YYYYmmddTHHMMSS>__<attempt>__<replica_id>__<run_id>`` — executions counted
  from the handler's own side effects, not from the ledger.
"""

from __future__ import annotations

import os
from pathlib import Path

from fastapi import FastAPI

from fastapi_voltro_schedules import (
    RetryPolicy,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_schedule,
    schedules_router,
)

config = SchedulingConfig()
_MARKERS = os.environ.get("RETRY_MARKER_DIR")


def _mark(ctx: ScheduleContext) -> None:
    if _MARKERS:
        slot = ctx.scheduled_at.strftime("%Y%m%dT%H%M%S")
        name = f"{ctx.name}__{slot}__{ctx.attempt}__{config.replica_id}__{ctx.run_id}"
        (Path(_MARKERS) / name).touch(exist_ok=False)


async def flaky(ctx: ScheduleContext) -> None:
    _mark(ctx)
    if ctx.attempt <= 2:
        raise ConnectionError(f"upstream refused attempt {ctx.attempt}")


async def stubborn(ctx: ScheduleContext) -> None:
    _mark(ctx)
    raise RuntimeError(f"still broken (attempt {ctx.attempt})")


scheduling = Scheduling(
    [
        define_schedule(
            name="flaky",
            cron=os.environ.get("RETRY_FLAKY_CRON", "*/20 * * * * *"),
            timezone="UTC",
            handler=flaky,
            retry=RetryPolicy(
                attempts=3, backoff_ms=int(os.environ.get("RETRY_BACKOFF_MS", "3000"))
            ),
        ),
        define_schedule(
            name="stubborn",
            cron=os.environ.get("RETRY_STUBBORN_CRON", "*/20 * * * * *"),
            timezone="UTC",
            handler=stubborn,
            retry=RetryPolicy(
                attempts=5, backoff_ms=int(os.environ.get("RETRY_STUBBORN_BACKOFF_MS", "8000"))
            ),
        ),
    ],
    config=config,
)
app = FastAPI(title="voltro retry test app", lifespan=scheduling.lifespan)
app.include_router(schedules_router)
