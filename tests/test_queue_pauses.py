"""A pause holds the firings waiting in a queue schedule's line (``on_overlap="queue"``).

A firing already waiting when its schedule is paused must not start while paused, whatever
frees its turn: the run ahead ends, the turn comes — and the waiter is held, keeping its place
(a ``queued`` row in the durable line on Postgres and MariaDB, still beating; a waiter in the
in-process chain on SQLite). After the resume the held firings run, one at a time, in
``scheduled_at`` order and before the occurrences after the resume; the slots due while paused
leave no row, and the audit finds the ledger clean.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest
from support.queue_lines import Line
from support.running import runs_of
from support.waiting import wait_until

from fastapi_voltro_schedules import RunStatus, Scheduling, SchedulingConfig, define_schedule
from fastapi_voltro_schedules.audit import audit_ledger
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.store import create_store
from fastapi_voltro_schedules.testing import ManualClock

STORES = [
    pytest.param("sqlite"),
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("mariadb", marks=pytest.mark.mariadb),
]
T0 = datetime(2026, 6, 1, 12, 0, 30, tzinfo=UTC)


def minute(n: int) -> datetime:
    return datetime(2026, 6, 1, 12, n, tzinfo=UTC)


async def waiting(s: Scheduling) -> list[datetime]:
    """The slots of ``batch`` waiting in line: ``queued`` rows (durable line) or the
    in-process chain's waiters (SQLite, which writes no queued row)."""
    rows = [r for r in await runs_of(s, "batch") if r.status is RunStatus.QUEUED]
    here = s.running_engine().waiting_here()
    return sorted({r.scheduled_at for r in [*rows, *here]})


async def waiting_is(s: Scheduling, expected: list[datetime]) -> bool:
    return await waiting(s) == expected


def started(line: Line) -> list[datetime]:
    return [slot for slot, _, _ in line.spans]


@pytest.mark.parametrize("store", STORES)
async def test_a_pause_holds_the_firings_waiting_in_line_until_the_resume(
    store: str, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "fastapi_voltro_schedules")
    url = request.getfixturevalue(f"{store}_url")
    await upgrade_to_head(url)
    line = Line()
    line.hold = True
    job = define_schedule(
        name="batch", cron="* * * * *", timezone="UTC", on_overlap="queue", handler=line
    )
    clock = ManualClock(T0)
    config = SchedulingConfig(database_url=url, replica_id="solo")
    s = Scheduling([job], config=config, clock=clock)
    async with s.run():
        await clock.advance(30)  # 12:01 runs, held open by the test
        await wait_until(lambda: started(line) == [minute(1)], what="12:01 to start")
        await clock.advance(60)  # 12:02 waits behind it
        await clock.advance(60)  # 12:03 waits behind 12:02
        await wait_until(
            lambda: waiting_is(s, [minute(2), minute(3)]), what="12:02 and 12:03 in line"
        )
        await s.pause("batch", by="oncall", reason="INC-7")
        line.release(minute(1))  # the run ahead ends: 12:02's turn comes, paused

        def held_or_started() -> bool:
            held = "queued firing held in line  name=batch" in caplog.text
            return held or len(line.spans) > 1

        await wait_until(held_or_started, what="12:02's turn, held or started")
        assert started(line) == [minute(1)], "a queued firing started while paused"
        # the turn comes as 12:01's handler ends; its row's outcome is written just after
        async def first_over() -> list[tuple[datetime, RunStatus]]:
            rows = await runs_of(s, "batch")
            ended = [(r.scheduled_at, r.status) for r in rows if r.scheduled_at == minute(1)]
            return ended if all(st.terminal for _, st in ended) else []

        ended = await wait_until(first_over, what="12:01's row terminal")
        assert ended == [(minute(1), RunStatus.SUCCEEDED)]
        assert await waiting(s) == [minute(2), minute(3)]  # held, in line, visible
        await clock.advance(60)  # 12:04 comes due paused: no row at all
        await s.resume("batch", by="oncall")
        # The held firings run in order, one at a time, before anything after the resume.
        await wait_until(lambda: started(line) == [minute(1), minute(2)], what="12:02 to run")
        await clock.advance(60)  # 12:05, the first occurrence after the resume: behind them
        await wait_until(lambda: waiting_is(s, [minute(3), minute(5)]), what="12:05 in line")
        line.release(minute(2))
        await wait_until(lambda: len(line.spans) == 3, what="12:03 to run")
        line.release(minute(3))
        await wait_until(lambda: len(line.spans) == 4, what="12:05 to run")
        line.release(minute(5))

        async def settled() -> bool:
            rows = await runs_of(s, "batch")
            return len(rows) == 4 and all(r.status is RunStatus.SUCCEEDED for r in rows)

        await wait_until(settled, what="four succeeded rows")
        rows = await runs_of(s, "batch")
        end = clock.now()
    assert [r.scheduled_at for r in rows] == [minute(1), minute(2), minute(3), minute(5)]
    assert started(line) == [minute(1), minute(2), minute(3), minute(5)]
    line.assert_serial_in_order()
    assert "resumed — queued firing takes its turn  name=batch" in caplog.text
    audit_store = create_store(url)
    try:
        # 12:04 is inside the paused span: owed nothing. Every other slot has its one row.
        report = await audit_ledger(
            audit_store,
            [job],
            T0 - timedelta(hours=1),
            end,
            heartbeat_ms=config.schedule_heartbeat_ms,
            now=end + timedelta(minutes=5),
        )
    finally:
        await audit_store.dispose()
    assert report.clean, report.text()
    assert report.gap_checked == ("batch",)
