"""A test app for the dashboard: ``uvicorn apps.dashboard_app:app`` (``tests/`` on the path).

Real time (the system clock), so the browser sees real runs land and countdowns tick:

- ``heartbeat`` (``*/2 * * * * *``, succeeds) and ``flaky`` (``*/3 * * * * *``, raises
  ``ConnectionRefusedError``): the succeeded and failed runs of the timeline;
- ``dailyDigest`` (``0 9 * * *`` Europe/Berlin) and ``invoice`` (external, monthly): schedules
  with no runs, for the empty states and an hours-long countdown;
- the handlers ``tenantReport`` and ``cleanup`` (``define_handler``), which the schedule form
  offers for run-time schedules.

Environment: the scheduler's ``VOLTRO_*`` config (database URL, tokens, replica id).

Test-only route: ``GET /_test/timer/{name}`` — when the timer fires ``name`` next (the instant
it moves past once its pass for a slot is done, paused or not) and how many firings it handed
out are still being admitted or run; a test that asserts a slot did *not* fire waits on it.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import FastAPI

from fastapi_voltro_schedules import (
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_handler,
    define_schedule,
    schedules_router,
)
from fastapi_voltro_schedules.clock import iso_z
from fastapi_voltro_schedules.dispatcher import Dispatcher


async def _beat(ctx: ScheduleContext) -> None:
    return None


async def _send(ctx: ScheduleContext) -> None:
    raise ConnectionRefusedError("smtp.internal:25 refused the connection")


@define_handler(name="tenantReport")
async def tenant_report(ctx: ScheduleContext) -> None:
    return None


@define_handler(name="cleanup")
async def cleanup(ctx: ScheduleContext) -> None:
    return None


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

scheduling = Scheduling(schedules, config=SchedulingConfig(), handlers=[tenant_report, cleanup])
app = FastAPI(title="voltro dashboard test app", lifespan=scheduling.lifespan)
app.include_router(schedules_router)


# The firings the timer handed to the dispatcher (a herd, or one schedule's fallen-behind
# slots) that are not over yet: counted from the hand-over itself, so a firing is never "not
# started yet" and uncounted.
_firing = [0]
_spawn = Dispatcher.spawn


def _counted_spawn(
    self: Dispatcher, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any
) -> None:
    if self._runs is None or getattr(fn, "__name__", "") not in ("fire_batch", "fire_slots"):
        _spawn(self, fn, *args)
        return
    _firing[0] += 1

    async def counted(*args: Any) -> None:
        try:
            await fn(*args)
        finally:
            _firing[0] -= 1

    _spawn(self, counted, *args)


Dispatcher.spawn = _counted_spawn  # type: ignore[method-assign]


@app.get("/_test/timer/{name}")
async def timer(name: str) -> dict[str, object]:
    at = scheduling.running_engine().next_firing(name)
    return {"nextFiring": None if at is None else iso_z(at), "firing": _firing[0]}
