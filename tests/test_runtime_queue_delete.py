"""A deleted run-time schedule's queue (issue 31): the firings waiting in its line never run.

An ``on_overlap="queue"`` schedule written at run time has one run in flight and two firings
waiting behind it — in the in-process chain on SQLite (no row yet), as ``queued`` rows of the
durable line on Postgres — when it is deleted. The run in flight finishes; the waiters leave
the line at the delete and each ends with a ``missed`` row that says why
(``error_tag="written-off"``), as a boot writes off the line of a schedule no longer declared.
Nothing starts when the run ahead ends, nothing fires after the delete, and the audit finds
every slot before it accounted for.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import anyio
import pytest
from support.queue_lines import Line
from support.running import runs_of
from support.waiting import HANG, wait_until

from fastapi_voltro_schedules import (
    RunStatus,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_handler,
)
from fastapi_voltro_schedules.audit import audit_ledger
from fastapi_voltro_schedules.fire_requests import FireRequest, Why
from fastapi_voltro_schedules.maintenance import WRITTEN_OFF
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.store import create_store
from fastapi_voltro_schedules.testing import ManualClock

STORES = [
    pytest.param("sqlite"),
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("mariadb", marks=pytest.mark.mariadb),
]
T0 = datetime(2026, 6, 1, 12, 0, 30, tzinfo=UTC)
NAME = "batch.acme"
STOOD_DOWN = f"schedule: queued firing taken over elsewhere — standing down  name={NAME}"

line = Line()


@define_handler(name="lineHandler")
async def line_handler(ctx: ScheduleContext) -> None:
    await line(ctx)


def minute(n: int) -> datetime:
    return datetime(2026, 6, 1, 12, n, tzinfo=UTC)


def started() -> list[datetime]:
    return [slot for slot, _, _ in line.spans]


async def waiting(s: Scheduling) -> list[datetime]:
    """The slots waiting in line: ``queued`` rows (durable line) or the in-process chain's."""
    rows = [r for r in await runs_of(s, NAME) if r.status is RunStatus.QUEUED]
    here = s.running_engine().waiting_here()
    return sorted({r.scheduled_at for r in [*rows, *here]})


@pytest.mark.parametrize("store", STORES)
async def test_the_firings_waiting_in_a_deleted_schedules_line_are_written_off_not_run(
    store: str, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "fastapi_voltro_schedules")
    url = request.getfixturevalue(f"{store}_url")
    await upgrade_to_head(url)
    line.spans.clear()
    line.gates.clear()
    line.hold = True
    clock = ManualClock(T0)
    config = SchedulingConfig(database_url=url, replica_id="solo")
    s = Scheduling(config=config, clock=clock, handlers=[line_handler])
    async with s.run():
        durable = s.running_engine().admitter.line is not None
        assert durable is (store != "sqlite")  # both kinds of line are exercised
        await s.put_schedule(
            NAME, cron="* * * * *", timezone="UTC", handler="lineHandler", on_overlap="queue"
        )
        await clock.advance(30)  # 12:01 runs, held open by the test
        await wait_until(lambda: started() == [minute(1)], what="12:01 to start")
        await clock.advance(60)  # 12:02 waits behind it
        await clock.advance(60)  # 12:03 waits behind 12:02

        async def queued() -> bool:
            return await waiting(s) == [minute(2), minute(3)]

        await wait_until(queued, what="12:02 and 12:03 in line")
        await s.delete_schedule(NAME)
        # Written off by the time the delete returns: a row each that says why.
        rows = {r.scheduled_at: r for r in await runs_of(s, NAME)}
        for slot in (minute(2), minute(3)):
            assert (rows[slot].status, rows[slot].error_tag) == (RunStatus.MISSED, WRITTEN_OFF)
            assert f'schedule "{NAME}" was deleted' in (rows[slot].error_message or "")
        assert s.running_engine().waiting_here() == []
        assert "wrote off queued firings of a deleted schedule  name=" in caplog.text
        if durable:
            # the waiters looked (woken by the write-off), found their rows gone, stood down
            await wait_until(lambda: caplog.text.count(STOOD_DOWN) == 2, what="both stood down")

        line.release(minute(1))  # the run in flight finishes; its turn passes to nobody

        async def finished() -> bool:
            rows = await runs_of(s, NAME)
            return any(r.scheduled_at == minute(1) and r.status.terminal for r in rows)

        await wait_until(finished, what="12:01 to finish")
        await clock.advance(120)  # 12:04 and 12:05: the schedule is gone
        end = clock.now()
        rows_after = await runs_of(s, NAME)
        assert await waiting(s) == []
    assert started() == [minute(1)], "a written-off firing ran"
    assert [(r.scheduled_at, r.status) for r in rows_after] == [
        (minute(1), RunStatus.SUCCEEDED),
        (minute(2), RunStatus.MISSED),
        (minute(3), RunStatus.MISSED),
    ]
    audit_store = create_store(url)
    try:
        report = await audit_ledger(
            audit_store,
            [],
            T0 - timedelta(hours=1),
            end,
            heartbeat_ms=config.schedule_heartbeat_ms,
            now=end + timedelta(minutes=5),
        )
    finally:
        await audit_store.dispose()
    assert report.clean, report.text()
    assert report.gap_checked == (NAME,)


@pytest.mark.postgres
async def test_a_delete_on_one_replica_writes_off_the_waiters_of_another(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The waiters are ``pod-b``'s, the delete is made on ``pod-a`` before ``pod-b`` has
    read it (its heartbeat is not moved): the write-off in the shared ledger is what stops
    them — they find their rows no longer queued at their next look and stand down."""
    caplog.set_level(logging.INFO, "fastapi_voltro_schedules")
    await upgrade_to_head(postgres_url)
    line.spans.clear()
    line.gates.clear()
    line.hold = True
    clock = ManualClock(T0)

    def replica(name: str) -> Scheduling:
        config = SchedulingConfig(database_url=postgres_url, replica_id=name)
        return Scheduling(config=config, clock=clock, handlers=[line_handler])

    a, b = replica("pod-a"), replica("pod-b")
    async with a.run(), b.run():
        await a.put_schedule(
            NAME, cron="* * * * *", timezone="UTC", handler="lineHandler", on_overlap="queue"
        )
        b.running_catalog().poke()  # b reads the put now (its heartbeat is never moved)
        await wait_until(lambda: b.get(NAME) is not None, what="pod-b to read the put")
        schedule = b.schedule(NAME)
        engine = b.running_engine()
        # Every firing on b (the clock stays before 12:01: no timer fires anywhere).
        first = await engine.fire(FireRequest(schedule, minute(1), Why.TIMER))
        await wait_until(lambda: started() == [minute(1)], what="12:01 to start on pod-b")
        behind = [await engine.fire(FireRequest(schedule, minute(m), Why.TIMER)) for m in (2, 3)]

        async def queued() -> bool:
            return await waiting(b) == [minute(2), minute(3)]

        await wait_until(queued, what="12:02 and 12:03 in pod-b's line")
        await a.delete_schedule(NAME)
        assert b.get(NAME) is not None  # b has not read the delete
        rows = {r.scheduled_at: r for r in await runs_of(a, NAME)}
        assert [(rows[m].replica_id, rows[m].status) for m in (minute(2), minute(3))] == [
            ("pod-b", RunStatus.MISSED),
            ("pod-b", RunStatus.MISSED),
        ]
        with anyio.fail_after(HANG):
            # at their next look (the head's poll; the other once promoted): stood down
            assert [await f.finished() for f in behind] == [None, None]
        assert caplog.text.count(STOOD_DOWN) == 2
        line.release(minute(1))
        with anyio.fail_after(HANG):
            assert await first.finished() is RunStatus.SUCCEEDED
        b.running_catalog().poke()
        await wait_until(lambda: b.get(NAME) is None, what="pod-b to read the delete")
        rows_after = await runs_of(a, NAME)
    assert started() == [minute(1)], "a written-off firing ran"
    assert [(r.scheduled_at, r.status) for r in rows_after] == [
        (minute(1), RunStatus.SUCCEEDED),
        (minute(2), RunStatus.MISSED),
        (minute(3), RunStatus.MISSED),
    ]
