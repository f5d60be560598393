"""A test app for the external trigger: ``uvicorn apps.external_app:app`` (``tests/`` on the path).

Time is a :class:`~fastapi_voltro_schedules.testing.ManualClock`, moved over HTTP by the test
(``POST /_test/clock?to=<ISO>``), so a test decides when a request "arrives" and when the
external missed watcher wakes — in the server process, on every replica alike.

Environment:

- ``VOLTRO_*``            the scheduler's config (``SchedulingConfig()``): database URL,
                          replica id, tokens, ``VOLTRO_EXTERNAL_MISSED_POLICY``, …
- ``EXT_CLOCK_START``     the clock at boot (ISO-8601), default ``2026-03-04T08:30:00+00:00``.
- ``EXT_MARKER_DIR``      every handler execution creates one empty file there, first thing:
                          ``<name>__<scheduled_at YYYYmmddTHHMMSS>__<replica_id>__<run_id>``.
- ``EXT_HANDLER_SECONDS`` how long each handler sleeps (real time), default ``0``.
- ``EXT_DUPLICATE_WAIT_SECONDS`` how long a duplicate arrival waits for the first one's row
  (``arrivals.DUPLICATE_WAIT_SECONDS``, 5 s): a test storming a busy machine sets
  it to a hang's bound, so a slow database is not taken for a claimant that died.
- a file ``hold`` in ``EXT_MARKER_DIR``: while it exists, handlers wait (at most a hang's
  bound) before they finish — a test that must see a run ``running`` holds it there, whatever
  the load.

Schedules: ``hourly`` (``0 * * * *`` UTC), ``minutely`` (``* * * * *`` UTC), ``failing``
(``30 9 * * *`` UTC, raises), ``berlinWeekday`` (``0 9 * * 1-5`` Europe/Berlin) — all
``trigger="external"`` — and ``selfJob`` (``0 3 * * *``, ``trigger="self"``). Handler for
run-time schedules: ``tenantReport`` (the same work).

Test-only routes: ``POST /_test/clock``, ``POST /_test/clock/advance?seconds=``,
``GET /_test/metrics`` (Prometheus text of the global registry), ``GET /_test/watcher``
(what the external missed watcher accounted for) and ``GET /_test/inspect-probe`` (guarded
by the inspect token, as the inspect routes are).
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import anyio
import anyio.lowlevel
from fastapi import APIRouter, FastAPI
from fastapi.responses import PlainTextResponse
from prometheus_client import generate_latest
from support.waiting import HANG

from fastapi_voltro_schedules import (
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    arrivals,
    define_handler,
    define_schedule,
    schedules_router,
)
from fastapi_voltro_schedules.api.auth import InspectAuth
from fastapi_voltro_schedules.api.errors import VoltroRoute
from fastapi_voltro_schedules.clock import iso_z
from fastapi_voltro_schedules.external_missed import ExternalMissedWatcher
from fastapi_voltro_schedules.testing import ManualClock

config = SchedulingConfig()
clock = ManualClock(
    datetime.fromisoformat(os.environ.get("EXT_CLOCK_START", "2026-03-04T08:30:00+00:00"))
)
_MARKERS = os.environ.get("EXT_MARKER_DIR")
_SLEEP = float(os.environ.get("EXT_HANDLER_SECONDS", "0"))
if os.environ.get("EXT_DUPLICATE_WAIT_SECONDS"):
    arrivals.DUPLICATE_WAIT_SECONDS = float(os.environ["EXT_DUPLICATE_WAIT_SECONDS"])


async def _work(ctx: ScheduleContext) -> None:
    if _MARKERS:
        slot = ctx.scheduled_at.strftime("%Y%m%dT%H%M%S")
        name = f"{ctx.name}__{slot}__{config.replica_id}__{ctx.run_id}"
        (Path(_MARKERS) / name).touch(exist_ok=False)
    if _SLEEP:
        await anyio.sleep(_SLEEP)
    if _MARKERS:
        with anyio.move_on_after(HANG):  # a bound for a test that died holding
            while (Path(_MARKERS) / "hold").exists():
                await anyio.sleep(0.02)


async def _failing(ctx: ScheduleContext) -> None:
    await _work(ctx)
    raise RuntimeError("boom")


schedules = [
    define_schedule(
        name="hourly", cron="0 * * * *", timezone="UTC", trigger="external", handler=_work
    ),
    define_schedule(
        name="minutely", cron="* * * * *", timezone="UTC", trigger="external", handler=_work
    ),
    define_schedule(
        name="failing", cron="30 9 * * *", timezone="UTC", trigger="external", handler=_failing
    ),
    define_schedule(
        name="berlinWeekday",
        cron="0 9 * * 1-5",
        timezone="Europe/Berlin",
        trigger="external",
        handler=_work,
    ),
    define_schedule(
        name="selfJob", cron="0 3 * * *", timezone="UTC", trigger="self", handler=_work
    ),
]

# a handler run-time schedules may name (PUT /_voltro/inspect/schedules/{name})
tenant_report = define_handler(name="tenantReport")(_work)

scheduling = Scheduling(schedules, config=config, clock=clock, handlers=[tenant_report])
app = FastAPI(title="voltro external-trigger test app", lifespan=scheduling.lifespan)
app.include_router(schedules_router)


@app.post("/_test/clock")
async def set_clock(to: str) -> dict[str, str]:
    clock.set(datetime.fromisoformat(to))
    await anyio.lowlevel.checkpoint()  # let woken sleepers run before answering
    return {"now": clock.now().isoformat()}


@app.post("/_test/clock/advance")
async def advance_clock(seconds: float) -> dict[str, str]:
    """Move wall and elapsed time together (``/_test/clock`` is a wall step, which the timer
    holds): what a test that waits for the timer to fire a slot needs."""
    await clock.advance(seconds)
    return {"now": clock.now().isoformat()}


@app.get("/_test/metrics", response_class=PlainTextResponse)
async def metrics() -> str:
    return generate_latest().decode()


# The external missed watcher this process runs (none under policy "off"), for /_test/watcher:
# a test asserting what it did *not* record waits for its cursors instead of sleeping.
_watchers: list[ExternalMissedWatcher] = []
_watch = ExternalMissedWatcher.run


async def _registered(self: ExternalMissedWatcher) -> None:
    _watchers.append(self)  # in the watcher task's first step: before any request is served
    await _watch(self)


ExternalMissedWatcher.run = _registered  # type: ignore[method-assign]


@app.get("/_test/watcher")
async def watcher() -> dict[str, object]:
    """Whether a watcher runs here and, per schedule, the newest occurrence its passes settled
    (recorded, run, or found claimed): a cursor moves only once its occurrences' writes are
    done, so nothing it could still record for them is in flight."""
    cursors = {name: iso_z(at) for w in _watchers for name, at in w.cursors.items()}
    return {"watching": bool(_watchers), "cursors": cursors}


# Like the package's own routers: VoltroRoute maps the auth dependency's errors to 401/503.
probe = APIRouter(route_class=VoltroRoute)


@probe.get("/_test/inspect-probe", dependencies=[InspectAuth])
async def inspect_probe() -> dict[str, bool]:
    return {"ok": True}


app.include_router(probe)
