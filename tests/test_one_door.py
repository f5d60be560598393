"""One door for a firing (issue 30): the timer, Run now, a range backfill and an external
arrival all come in through ``Dispatcher.fire``, each saying why; the dispatcher has no other
entry that fires, and the engine no forwarders."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from support.running import runs_of
from support.waiting import wait_until

from fastapi_voltro_schedules import (
    RunStatus,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    Trigger,
    define_schedule,
    schedules_router,
)
from fastapi_voltro_schedules.dispatcher import Dispatcher
from fastapi_voltro_schedules.engine import Engine
from fastapi_voltro_schedules.fire_requests import Due, FireRequest, Why
from fastapi_voltro_schedules.testing import ManualClock

T0 = datetime(2026, 6, 1, 11, 59, 30, tzinfo=UTC)
TOKEN = "one-door-test-token-0123456789"


def minute(n: int) -> datetime:
    return datetime(2026, 6, 1, 12, n, tzinfo=UTC)


def test_the_dispatcher_has_one_door_that_fires_and_the_engine_no_forwarders() -> None:
    public = {n for n, v in vars(Dispatcher).items() if not n.startswith("_") and callable(v)}
    # fire: the door; record_missed writes slots off (fires nothing); bind/spawn: lifecycle
    assert public == {"fire", "record_missed", "bind", "spawn"}
    forwarders = ("admit", "submit", "fire_now", "run_manual", "reap", "sweep")
    assert [n for n in forwarders if hasattr(Engine, n)] == []


@pytest.mark.parametrize("ledger", ["file", "memory"])
async def test_every_firer_comes_in_through_the_door_saying_why(
    ledger: str, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    came: list[tuple[str, Why]] = []
    door = Dispatcher.fire

    async def spy(self: Dispatcher, request: FireRequest | Due) -> Any:
        if isinstance(request, Due):
            came.extend((s.name, Why.TIMER) for s in request.schedules)
        else:
            came.append((request.schedule.name, request.why))
        return await door(self, request)  # type: ignore[call-overload]

    monkeypatch.setattr(Dispatcher, "fire", spy)

    async def noop(ctx: ScheduleContext) -> None:
        return None

    tick = define_schedule(name="tick", cron="* * * * *", timezone="UTC", handler=noop)
    ext = define_schedule(
        name="ext", cron="* * * * *", timezone="UTC", trigger="external", handler=noop
    )
    clock = ManualClock(T0)
    config = SchedulingConfig(
        database_url=sqlite_url if ledger == "file" else "sqlite+aiosqlite://",
        replica_id="solo",
        schedule_trigger_token=TOKEN,
    )
    s = Scheduling([tick, ext], config=config, clock=clock)
    app = FastAPI()
    app.include_router(schedules_router)
    async with (
        s.run(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http,
    ):
        await clock.advance(30)  # 12:00: the timer

        async def ticked() -> bool:
            return any(r.status.terminal for r in await runs_of(s, "tick"))

        await wait_until(ticked, what="the timer's 12:00 run")
        manual = await s.fire_now("tick")  # Run now
        r = await http.post(  # an external arrival, over the route
            "/_voltro/schedules/ext/trigger",
            headers={
                "Authorization": f"Bearer {TOKEN}",
                "X-Voltro-Scheduled-At": minute(0).isoformat(),
            },
        )
        assert r.status_code == 202, r.text
        summary = await s.backfill(  # a range backfill of two slots
            "tick",
            minute(0) - timedelta(seconds=150),
            minute(0) - timedelta(seconds=1),
            confirm=True,
        )
        assert summary.fired == 2

        async def settled() -> bool:
            rows = await runs_of(s, "tick") + await runs_of(s, "ext")
            return len(rows) == 5 and all(r.status.terminal for r in rows)

        await wait_until(settled, what="every firing recorded")
        rows = await runs_of(s, "tick") + await runs_of(s, "ext")
    assert came == [
        ("tick", Why.TIMER),
        ("tick", Why.RUN_NOW),
        ("ext", Why.ARRIVAL),
        ("tick", Why.RANGE),
        ("tick", Why.RANGE),
    ]
    by_trigger = sorted((r.name, r.trigger.value, r.scheduled_at) for r in rows)
    assert by_trigger == sorted(
        [
            ("tick", Trigger.SELF.value, minute(0)),
            ("tick", Trigger.MANUAL.value, manual.scheduled_at),
            ("ext", Trigger.EXTERNAL.value, minute(0)),
            ("tick", Trigger.MANUAL.value, minute(0) - timedelta(minutes=2)),
            ("tick", Trigger.MANUAL.value, minute(0) - timedelta(minutes=1)),
        ]
    )
    assert all(r.status is RunStatus.SUCCEEDED for r in rows)
