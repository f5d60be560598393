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

The sequence is placed when the lifespan starts, not at import (on a loaded machine uvicorn and
the boot could take longer than the 3 s it used to leave), and a boot that ends within 0.2 s of its
first slot boots again with a later one. What stays speed-dependent: a boot that overran its
first slot by more (five seconds of lead) may already have fired it, and that row would then
count twice; the lead is there to make that a hang-sized stall, not a busy machine.
``slow``'s first run lasts until its second slot is recorded, so the skip does not depend on
how late that slot fires.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

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

LEAD_SECONDS = 5
"""From the lifespan's start to the first slot: room for the scheduler's own boot (on a ledger
already migrated: open the file, read the pauses, arm — well under a second when idle)."""


def seconds(first: int, *offsets: int) -> str:
    return ",".join(str((first + o) % 60) for o in offsets) + " * * * * *"


def kaboom() -> None:
    raise ValueError("the handler's own defect")


async def ok(ctx: ScheduleContext) -> None:
    return None


async def boom(ctx: ScheduleContext) -> None:
    kaboom()


current: Scheduling | None = None


async def slow(ctx: ScheduleContext) -> None:
    await anyio.sleep(1.6)
    # Still running when the next slot comes, however late that one fires: its row (skipped)
    # is what ends this run. Bounded, so a broken run ends too.
    second = ctx.scheduled_at + timedelta(seconds=1)
    store = current.store if current is not None else None
    with anyio.move_on_after(HANG):
        while store is not None and not any(
            r.scheduled_at == second for r in await store.list_runs("slow", limit=10)
        ):
            await anyio.sleep(0.02)


def build(first: int) -> Scheduling:
    schedules = [
        define_schedule(name="ok", cron=seconds(first, 0, 1, 2), timezone="UTC", handler=ok),
        define_schedule(name="boom", cron=seconds(first, 0, 1), timezone="UTC", handler=boom),
        define_schedule(
            name="slow",
            cron=seconds(first, 0, 1),
            timezone="UTC",
            handler=slow,
            on_overlap="skip",
        ),
        define_schedule(
            name="late", cron=seconds(first, 30), timezone="UTC", handler=ok, backfill="skip"
        ),
    ]
    return Scheduling(schedules, config=SchedulingConfig())


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    global current
    deadline = time.monotonic() + HANG
    while time.monotonic() < deadline:
        first_at = int(time.time()) + LEAD_SECONDS
        current = build(first_at % 60)
        async with current.run(app):
            if time.time() < first_at - 0.2:  # armed before the sequence: keep it
                yield
                return
        # Booted too late for its own first slot (nothing of it was due yet when the boot
        # began, so nothing was recorded): boot again with a later sequence.
    raise RuntimeError(f"the scheduler never booted within {LEAD_SECONDS} s in {HANG} s")


app = FastAPI(title="voltro metrics test app", lifespan=lifespan)
app.include_router(schedules_router)
