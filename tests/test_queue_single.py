"""``on_overlap="queue"`` on a single-process store (SQLite): the in-process chain.

Before the split, ``queue`` was an ``anyio.Lock`` taken in one task and released in another:
an external arrival, a boot catch-up or ``record-and-run`` on a queue schedule crashed
``Scheduling.run`` (and the app's lifespan) with ``RuntimeError``, and the trigger request
waited for the previous run. Each path is driven here; the line must hold (never two at once,
in ``scheduled_at`` order), the other schedules keep firing, and nothing is logged as an error.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fastapi import FastAPI
from support.queue_lines import Line
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
from fastapi_voltro_schedules.errors import RunNowBusyError
from fastapi_voltro_schedules.store import RunRecord, new_run_id
from fastapi_voltro_schedules.testing import ManualClock

TOKEN = "queue-test-token-0123456789"
T0 = datetime(2026, 6, 1, 12, 0, 30, tzinfo=UTC)


def minute(n: int) -> datetime:
    return datetime(2026, 6, 1, 12, n, tzinfo=UTC)


def no_errors(caplog: pytest.LogCaptureFixture) -> None:
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not bad, [r.getMessage() for r in bad]
    assert "Traceback" not in caplog.text


def ticker() -> tuple[list[datetime], object]:
    fired: list[datetime] = []

    async def tick(ctx: ScheduleContext) -> None:
        fired.append(ctx.scheduled_at)

    return fired, define_schedule(name="tick", cron="* * * * *", timezone="UTC", handler=tick)


@pytest.mark.parametrize("ledger", ["file", "memory"])
async def test_external_arrivals_on_a_queue_schedule_answer_at_once_and_run_in_line(
    ledger: str, sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """On a SQLite file the external schedule's line is the file's durable one (other workers'
    arrivals join it, see ``coordination/sharing.py``): its waiters are ``queued`` rows. On the
    memory ledger (one process) it is the in-process chain."""
    caplog.set_level(logging.INFO, "fastapi_voltro_schedules")
    line = Line()
    line.hold = True
    job = define_schedule(
        name="batch",
        cron="* * * * *",
        timezone="UTC",
        trigger="external",
        on_overlap="queue",
        handler=line,
    )
    fired, tick = ticker()
    clock = ManualClock(T0 + timedelta(minutes=3))
    config = SchedulingConfig(
        database_url=sqlite_url if ledger == "file" else "sqlite+aiosqlite://",
        replica_id="solo",
        schedule_trigger_token=TOKEN,
    )
    s = Scheduling([job, tick], config=config, clock=clock)  # type: ignore[list-item]
    app = FastAPI()
    app.include_router(schedules_router)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        s.run(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http,
    ):
        answers = []
        for n in (1, 2, 3):
            r = await http.post(
                "/_voltro/schedules/batch/trigger",
                headers={**headers, "X-Voltro-Scheduled-At": minute(n).isoformat()},
            )
            answers.append((r.status_code, r.json()))
        # Each arrival answers 202 at once — the second and third while the first still runs:
        # no run can end before its gate is released below, so an arrival that waited for the
        # run ahead of it would never have answered.
        assert [a[0] for a in answers] == [202, 202, 202], answers
        assert all(end is None for _, _, end in line.spans), line.spans
        assert len({a[1]["runId"] for a in answers}) == 3
        await wait_until(lambda: line.spans, what="the first run to start")
        # The others wait: in the line, not handed it (a waiter leaves the line as it starts).
        if ledger == "file":
            rows = await runs_of(s, "batch")
            waiting = [r.scheduled_at for r in rows if r.status is RunStatus.QUEUED]
        else:
            waiting = [r.scheduled_at for r in s.running_engine().waiting_here()]
        assert waiting == [minute(2), minute(3)]
        assert [slot for slot, _, _ in line.spans] == [minute(1)]
        # A duplicate of a waiting occurrence is still a duplicate.
        dup = await http.post(
            "/_voltro/schedules/batch/trigger",
            headers={**headers, "X-Voltro-Scheduled-At": minute(2).isoformat()},
        )
        assert dup.status_code == 200 and dup.json()["status"] == "duplicate"
        # The scheduler keeps firing the other schedules meanwhile.
        await clock.advance(60)
        await wait_until(lambda: _true(len(fired) >= 1))
        for n in (1, 2, 3):
            line.release(minute(n))

        async def all_done() -> bool:
            rows = await runs_of(s, "batch")
            return len(rows) == 3 and all(r.status is RunStatus.SUCCEEDED for r in rows)

        await wait_until(all_done)
        rows = await runs_of(s, "batch")
        # The run ids answered are the ids the runs carry.
        assert [r.id for r in rows] == [a[1]["runId"] for a in answers]
    line.assert_serial_in_order()
    assert [slot for slot, _, _ in line.spans] == [minute(1), minute(2), minute(3)]
    assert "queued behind a run in flight   name=batch heldBy=solo" in caplog.text
    if ledger == "memory":
        # the chain says whom a waiter is behind; the durable line names the run in flight
        assert "queued behind an earlier firing name=batch" in caplog.text
    no_errors(caplog)


async def _true(value: bool) -> bool:
    return value


async def test_boot_catch_up_of_a_queue_schedule_runs_in_line(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    line = Line()
    job = define_schedule(
        name="batch",
        cron="* * * * *",
        timezone="UTC",
        on_overlap="queue",
        backfill="all",
        handler=line,
    )
    latest = define_schedule(
        name="latestBatch",
        cron="* * * * *",
        timezone="UTC",
        on_overlap="queue",
        backfill="latest",
        handler=line,
    )
    fired, tick = ticker()
    clock = ManualClock(T0 + timedelta(minutes=4))  # 12:04:30; last runs at 12:00
    config = SchedulingConfig(database_url=sqlite_url, replica_id="solo")
    s = Scheduling([job, latest, tick], config=config, clock=clock)  # type: ignore[list-item]
    from fastapi_voltro_schedules.store import create_store

    seed = create_store(sqlite_url)
    await seed.create_schema()
    for name in ("batch", "latestBatch"):
        await seed.insert_run(
            RunRecord(
                id=new_run_id(),
                name=name,
                scheduled_at=minute(0),
                status=RunStatus.SUCCEEDED,
                trigger=Trigger.SELF,
                fired_at=minute(0),
                finished_at=minute(0),
            )
        )
    await seed.dispose()
    async with s.run():

        async def caught_up() -> bool:
            rows = await runs_of(s, "batch")
            return len(rows) == 5 and all(r.status is RunStatus.SUCCEEDED for r in rows)

        await wait_until(caught_up)
        await clock.advance(60)  # 12:05: the live timer fires after the catch-up
        await wait_until(lambda: _true(len(fired) >= 1))

        async def live_done() -> bool:
            rows = await runs_of(s, "batch")
            return len(rows) == 6 and all(r.status.terminal for r in rows)

        await wait_until(live_done)
        latest_rows = await runs_of(s, "latestBatch")
    # batch ran 12:01 … 12:04 then 12:05, latestBatch ran 12:04 (its catch-up) and 12:05.
    assert sorted(slot for slot, _, _ in line.spans).count(minute(4)) == 2
    assert len(line.spans) == 7
    assert [r.status for r in latest_rows[:5]] == [
        RunStatus.SUCCEEDED,
        RunStatus.MISSED,
        RunStatus.MISSED,
        RunStatus.MISSED,
        RunStatus.SUCCEEDED,
    ]
    no_errors(caplog)


async def test_run_now_on_a_queue_schedule_runs_and_the_line_goes_on(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    line = Line()
    line.hold = True
    job = define_schedule(
        name="batch", cron="* * * * *", timezone="UTC", on_overlap="queue", handler=line
    )
    clock = ManualClock(T0)
    config = SchedulingConfig(database_url=sqlite_url, replica_id="solo")
    s = Scheduling([job], config=config, clock=clock)
    async with s.run():
        manual = await s.fire_now("batch")  # returns once the row exists
        assert manual.trigger is Trigger.MANUAL and manual.status is RunStatus.RUNNING
        await clock.advance(30)  # 12:01 fires: queued behind the Run now

        def queued() -> bool:
            waiting = s.running_engine().waiting_here()
            return bool(line.spans) and [r.scheduled_at for r in waiting] == [minute(1)]

        await wait_until(queued, what="12:01 in line behind the Run now")
        assert len(line.spans) == 1
        # One Run now of a schedule in flight per process (docs/engine.md, "Run now").
        with pytest.raises(RunNowBusyError):
            await s.fire_now("batch")
        line.release(line.spans[0][0])
        await wait_until(lambda: _true(len(line.spans) == 2))  # 12:01 runs after the Run now

        async def manual_done() -> bool:
            assert s.store is not None
            row = await s.store.get_run(manual.id)
            return row is not None and row.terminal

        await wait_until(manual_done)
        # The Run now is over once its task lets the schedule go, just after the row's write.
        dispatcher = s.running_engine().dispatcher
        await wait_until(lambda: "batch" not in dispatcher._manual, what="the Run now to end")
        second = await s.fire_now("batch")  # Run now runs even while the queued firing runs
        await wait_until(lambda: _true(len(line.spans) == 3))
        for slot, _, _ in list(line.spans):
            line.release(slot)

        async def done() -> bool:
            rows = await runs_of(s, "batch")
            return len(rows) == 3 and all(r.status is RunStatus.SUCCEEDED for r in rows)

        await wait_until(done)
        rows = await runs_of(s, "batch")
    assert {r.id for r in rows} >= {manual.id, second.id}
    assert line.spans[1][0] == minute(1)  # the queued firing ran after the Run now ahead
    no_errors(caplog)


async def test_record_and_run_on_a_queue_schedule_runs_the_missed_in_line(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    line = Line()
    job = define_schedule(
        name="batch",
        cron="* * * * *",
        timezone="UTC",
        trigger="external",
        on_overlap="queue",
        handler=line,
    )
    fired, tick = ticker()
    clock = ManualClock(T0)
    config = SchedulingConfig(
        database_url=sqlite_url,
        replica_id="solo",
        external_missed_policy="record-and-run",
        external_trigger_skew_ms=10_000,
    )
    s = Scheduling([job, tick], config=config, clock=clock)  # type: ignore[list-item]
    async with s.run():
        # The watcher starts from this process's boot: let it take its first look first
        # (timer, watchdog, reaper, retention and watcher all parked on the clock).
        await wait_until(lambda: _true(clock.sleepers >= 5))
        await clock.advance(4 * 60)  # 12:01 … 12:04 close without an arrival

        async def ran() -> bool:
            rows = [r for r in await runs_of(s, "batch") if r.status is not RunStatus.MISSED]
            return len(rows) >= 3 and all(r.status is RunStatus.SUCCEEDED for r in rows)

        await wait_until(ran)
        await wait_until(lambda: _true(len(fired) >= 1))
    line.assert_serial_in_order()
    no_errors(caplog)
