"""Schedules written at run time (SPEC §7; issue 31), in process on a SQLite file and the
injected clock: ``put_schedule`` / ``delete_schedule`` and what the running engine makes of
them — a new schedule fires each slot once from its creation, an edit is a new version (no
re-run, no false ``missed``), a delete stops it (a run in flight finishes), pause and overlap
apply, a restart loads them, and the audit finds the ledger clean.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
from support.running import runs_of
from support.waiting import wait_until

from fastapi_voltro_schedules import (
    NamedHandler,
    RunStatus,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_handler,
    define_schedule,
)
from fastapi_voltro_schedules.audit import audit_ledger
from fastapi_voltro_schedules.errors import (
    DeclaredInCodeError,
    InvalidScheduleError,
    ScheduleNotFoundError,
)
from fastapi_voltro_schedules.runtime_schedules import MAX_ARGS_BYTES
from fastapi_voltro_schedules.store import RunRecord, create_store
from fastapi_voltro_schedules.testing import ManualClock

T0 = datetime(2026, 6, 1, 10, 0, 30, tzinfo=UTC)
NAME = "report.acme"


def at(hour: int, minute: int, second: int = 0) -> datetime:
    return datetime(2026, 6, 1, hour, minute, second, tzinfo=UTC)


class Calls:
    """What the handlers saw: (handler, schedule, slot, args)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, datetime, dict[str, Any]]] = []
        self.gate: anyio.Event | None = None
        self.started = anyio.Event()

    def handler(self, handler_name: str) -> NamedHandler:
        @define_handler(name=handler_name)
        async def work(ctx: ScheduleContext) -> None:
            self.seen.append((handler_name, ctx.name, ctx.scheduled_at, dict(ctx.args)))
            self.started.set()
            if self.gate is not None:
                await self.gate.wait()

        return work

    def slots(self, name: str = NAME) -> list[datetime]:
        return [slot for _, schedule, slot, _ in self.seen if schedule == name]


@asynccontextmanager
async def booted(
    url: str, clock: ManualClock, calls: Calls, **kwargs: Any
) -> AsyncIterator[Scheduling]:
    config = SchedulingConfig(database_url=url, replica_id="pod-1")
    handlers = kwargs.pop("handlers", [calls.handler("tenantReport"), calls.handler("cleanup")])
    scheduling = Scheduling(
        kwargs.pop("schedules", []), config=config, clock=clock, handlers=handlers
    )
    async with scheduling.run():
        yield scheduling


async def settled(scheduling: Scheduling, count: int, name: str = NAME) -> list[RunRecord]:
    async def ready() -> list[RunRecord] | None:
        rows = await runs_of(scheduling, name)
        return rows if len(rows) == count and all(r.status.terminal for r in rows) else None

    rows: list[RunRecord] = await wait_until(ready, what=f"{count} settled rows of {name}")
    return rows


async def to(clock: ManualClock, instant: datetime) -> None:
    await clock.advance((instant - clock.now()).total_seconds())


def statuses(rows: list[RunRecord]) -> list[tuple[datetime, RunStatus]]:
    return [(r.scheduled_at, r.status) for r in rows]


async def audit_clean(url: str, now: datetime) -> None:
    store = create_store(url)
    try:
        report = await audit_ledger(store, [], T0 - timedelta(days=1), now, now=now)
    finally:
        await store.dispose()
    assert report.clean, report.text()
    assert NAME in report.gap_checked


async def put(scheduling: Scheduling, cron: str = "* * * * *", **kwargs: Any) -> Any:
    kwargs.setdefault("handler", "tenantReport")
    kwargs.setdefault("timezone", "UTC")
    return await scheduling.put_schedule(NAME, cron=cron, **kwargs)


# -- create ---------------------------------------------------------------------------------


async def test_a_written_schedule_fires_each_slot_once_from_its_creation(sqlite_url: str) -> None:
    calls, clock = Calls(), ManualClock(T0)
    async with booted(sqlite_url, clock, calls) as scheduling:
        result = await put(scheduling, args={"tenant": "acme", "n": 3}, by="ops")
        assert (result.created, result.changed) == (True, True)
        assert result.version.version == 1 and result.version.source == "runtime"
        assert result.version.effective_from == T0
        assert result.schedule.source == "runtime"
        assert scheduling.get(NAME) is result.schedule
        assert scheduling.engine is not None
        assert scheduling.engine.next_firing(NAME) == at(10, 1)
        for count, slot in enumerate([at(10, 1), at(10, 2), at(10, 3)], start=1):
            await to(clock, slot)
            rows = await settled(scheduling, count)
        # 10:00 came before the creation: never owed, never recorded
        assert statuses(rows) == [
            (s, RunStatus.SUCCEEDED) for s in (at(10, 1), at(10, 2), at(10, 3))
        ]
        assert [args for *_, args in calls.seen] == [{"n": 3, "tenant": "acme"}] * 3
        # the same definition again writes nothing
        again = await put(scheduling, args={"tenant": "acme", "n": 3})
        assert (again.created, again.changed, again.version.version) == (False, False, 1)
    await audit_clean(sqlite_url, at(10, 5))


async def test_a_new_schedule_wakes_a_timer_sleeping_towards_a_later_instant(
    sqlite_url: str,
) -> None:
    """The timer sleeps until the next instant it knows (here a daily declared schedule's,
    hours away): a schedule written meanwhile must fire on its own first slot."""
    calls, clock = Calls(), ManualClock(T0)

    async def daily(ctx: ScheduleContext) -> None:
        return None

    declared = define_schedule(name="daily", cron="0 3 * * *", timezone="UTC", handler=daily)
    clock = ManualClock(at(10, 0, 45))  # the timer's first sleep (30 s at most) ends 10:01:15
    async with booted(sqlite_url, clock, calls, schedules=[declared]) as scheduling:
        await clock.advance(5)
        await put(scheduling)
        await to(clock, at(10, 1))
        rows = await wait_until(lambda: runs_of(scheduling, NAME), timeout=10, what="10:01")
        assert rows[0].scheduled_at == at(10, 1)


# -- edit -----------------------------------------------------------------------------------


@pytest.mark.parametrize("backfill", ["skip", "latest", "all"])
async def test_an_edit_is_a_new_version_without_a_rerun_or_a_false_missed(
    sqlite_url: str, backfill: str
) -> None:
    calls, clock = Calls(), ManualClock(at(9, 59, 30))
    async with booted(sqlite_url, clock, calls) as scheduling:
        await put(scheduling, "0 * * * *", backfill=backfill, args={"v": 1})
        await to(clock, at(10, 0))
        await settled(scheduling, 1)
        await to(clock, at(10, 20))
        # 10:15 of the new cadence is before the edit: not run, not missed; 11:00 of the old
        # cadence is after it: not the schedule's any more
        edited = await put(scheduling, "15 * * * *", backfill=backfill, args={"v": 2})
        assert (edited.created, edited.changed, edited.version.version) == (False, True, 2)
        assert scheduling.engine is not None
        assert scheduling.engine.next_firing(NAME) == at(11, 15)
        await to(clock, at(11, 15))
        rows = await settled(scheduling, 2)
        await to(clock, at(12, 15))
        rows = await settled(scheduling, 3)
    assert statuses(rows) == [
        (at(10, 0), RunStatus.SUCCEEDED),
        (at(11, 15), RunStatus.SUCCEEDED),
        (at(12, 15), RunStatus.SUCCEEDED),
    ]
    assert [args for *_, args in calls.seen] == [{"v": 1}, {"v": 2}, {"v": 2}]
    await audit_clean(sqlite_url, at(12, 30))


async def test_an_edit_of_args_alone_keeps_the_cadence(sqlite_url: str) -> None:
    calls, clock = Calls(), ManualClock(T0)
    async with booted(sqlite_url, clock, calls) as scheduling:
        await put(scheduling, args={"v": 1})
        await to(clock, at(10, 1))
        await settled(scheduling, 1)
        await clock.advance(10)
        await put(scheduling, args={"v": 2}, handler="cleanup")
        await to(clock, at(10, 2))
        rows = await settled(scheduling, 2)
        store = scheduling.running_store()
        versions = (await store.definitions([NAME]))[NAME]
    assert statuses(rows) == [(at(10, 1), RunStatus.SUCCEEDED), (at(10, 2), RunStatus.SUCCEEDED)]
    assert [(h, args) for h, _, _, args in calls.seen] == [
        ("tenantReport", {"v": 1}),
        ("cleanup", {"v": 2}),
    ]
    assert [(v.version, v.handler, json.loads(v.args)) for v in versions] == [
        (2, "cleanup", {"v": 2}),
        (1, "tenantReport", {"v": 1}),
    ]


# -- delete ---------------------------------------------------------------------------------


async def test_a_delete_stops_the_schedule_and_lets_the_run_in_flight_finish(
    sqlite_url: str,
) -> None:
    calls, clock = Calls(), ManualClock(T0)
    calls.gate = anyio.Event()
    async with booted(sqlite_url, clock, calls) as scheduling:
        await put(scheduling)
        await to(clock, at(10, 1))
        with anyio.fail_after(30):
            await calls.started.wait()
        await scheduling.delete_schedule(NAME, by="ops")
        assert scheduling.get(NAME) is None
        assert scheduling.engine is not None and scheduling.engine.next_firing(NAME) is None
        calls.gate.set()  # the run in flight finishes, and is recorded
        rows = await settled(scheduling, 1)
        for minute in (2, 3, 4):
            await to(clock, at(10, minute))
        await clock.advance(1)
        assert statuses(await runs_of(scheduling, NAME)) == [(at(10, 1), RunStatus.SUCCEEDED)]
        with pytest.raises(ScheduleNotFoundError):
            await scheduling.delete_schedule(NAME)
        with pytest.raises(ScheduleNotFoundError):
            await scheduling.delete_schedule("never.written")
        versions = (await scheduling.running_store().definitions([NAME]))[NAME]
        assert [(v.version, v.deleted) for v in versions] == [(2, True), (1, False)]
        # written again: a new span, from its new creation
        result = await put(scheduling)
        assert (result.created, result.version.version) == (True, 3)
        await to(clock, at(10, 5))
        rows = await settled(scheduling, 2)
    assert statuses(rows) == [(at(10, 1), RunStatus.SUCCEEDED), (at(10, 5), RunStatus.SUCCEEDED)]
    assert calls.slots() == [at(10, 1), at(10, 5)]
    await audit_clean(sqlite_url, at(10, 6))


# -- pause and overlap ----------------------------------------------------------------------


async def test_pause_applies_to_a_written_schedule(sqlite_url: str) -> None:
    calls, clock = Calls(), ManualClock(T0)
    async with booted(sqlite_url, clock, calls) as scheduling:
        await put(scheduling)
        await scheduling.pause(NAME, by="operator")
        await to(clock, at(10, 1))
        await to(clock, at(10, 2))
        await clock.advance(1)
        assert await runs_of(scheduling, NAME) == []
        await scheduling.resume(NAME, by="operator")
        await to(clock, at(10, 3))
        rows = await settled(scheduling, 1)
    assert statuses(rows) == [(at(10, 3), RunStatus.SUCCEEDED)]
    await audit_clean(sqlite_url, at(10, 4))


async def test_overlap_skip_applies_to_a_written_schedule(sqlite_url: str) -> None:
    calls, clock = Calls(), ManualClock(T0)
    calls.gate = anyio.Event()
    async with booted(sqlite_url, clock, calls) as scheduling:
        await put(scheduling, on_overlap="skip")
        await to(clock, at(10, 1))
        with anyio.fail_after(30):
            await calls.started.wait()
        await to(clock, at(10, 2))  # 10:01 still runs
        await wait_until(
            lambda: _has_status(scheduling, RunStatus.SKIPPED), what="the skipped 10:02"
        )
        calls.gate.set()
        rows = await settled(scheduling, 2)
    assert statuses(rows) == [(at(10, 1), RunStatus.SUCCEEDED), (at(10, 2), RunStatus.SKIPPED)]


async def _has_status(scheduling: Scheduling, status: RunStatus) -> bool:
    return any(r.status is status for r in await runs_of(scheduling, NAME))


# -- restart --------------------------------------------------------------------------------


async def test_a_restart_loads_written_schedules_and_catches_them_up(sqlite_url: str) -> None:
    calls, clock = Calls(), ManualClock(T0)
    async with booted(sqlite_url, clock, calls) as scheduling:
        await put(scheduling, "*/10 * * * *", backfill="all", args={"tenant": "acme"})
        await put(scheduling, "*/10 * * * *", backfill="all", handler="cleanup")
        await scheduling.put_schedule("gone", cron="* * * * *", timezone="UTC", handler="cleanup")
        await scheduling.delete_schedule("gone")
        await to(clock, at(10, 10))
        await settled(scheduling, 1)
    calls2 = Calls()
    clock = ManualClock(at(10, 35))  # down over 10:20 and 10:30
    async with booted(sqlite_url, clock, calls2) as scheduling:
        assert [s.name for s in scheduling.schedules] == [NAME]
        schedule = scheduling.schedule(NAME)
        assert (schedule.source, schedule.handler_ref, dict(schedule.args)) == (
            "runtime",
            "cleanup",
            {},
        )
        rows = await settled(scheduling, 3)  # backfill="all": both owed slots run at boot
        await to(clock, at(10, 40))
        rows = await settled(scheduling, 4)
    assert statuses(rows) == [
        (s, RunStatus.SUCCEEDED) for s in (at(10, 10), at(10, 20), at(10, 30), at(10, 40))
    ]
    assert [(h, slot) for h, _, slot, _ in calls2.seen] == [
        ("cleanup", at(10, 20)),
        ("cleanup", at(10, 30)),
        ("cleanup", at(10, 40)),
    ]
    assert await runs_of_store(sqlite_url, "gone") == []
    await audit_clean(sqlite_url, at(10, 45))


async def runs_of_store(url: str, name: str) -> list[RunRecord]:
    store = create_store(url)
    try:
        return await store.list_runs(name, limit=100)
    finally:
        await store.dispose()


async def test_an_unknown_handler_at_boot_is_a_warning_and_the_app_boots(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    calls, clock = Calls(), ManualClock(T0)
    async with booted(sqlite_url, clock, calls) as scheduling:
        await put(scheduling, handler="cleanup")
    caplog.set_level(logging.WARNING, logger="fastapi_voltro_schedules")
    clock = ManualClock(at(10, 5))
    async with booted(
        sqlite_url, clock, calls, handlers=[calls.handler("tenantReport")]
    ) as scheduling:
        assert scheduling.get(NAME) is None
        await to(clock, at(10, 7))
        assert await runs_of(scheduling, NAME) == []
    warned = [r.getMessage() for r in caplog.records if "not armed" in r.getMessage()]
    assert len(warned) == 1
    assert f"name={NAME}" in warned[0] and "handler=cleanup" in warned[0]
    assert "@define_handler(name='cleanup')" in warned[0] and "delete" in warned[0]


# -- refusals -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "changes"),
    [
        ("name", {"name": "bad name"}),
        ("cron", {"cron": "0 25 * * *"}),
        ("cron", {"cron": ""}),
        ("timezone", {"timezone": "Mars/Olympus"}),
        ("timezone", {"timezone": ""}),
        ("handler", {"handler": "noSuchHandler"}),
        ("args", {"args": ["not", "an", "object"]}),
        ("args", {"args": {"x": "y" * MAX_ARGS_BYTES}}),
        ("args", {"args": {1: "int key"}}),
        ("args", {"args": {"when": datetime(2026, 1, 1)}}),
        ("args", {"args": {"nan": float("nan")}}),
        ("on_overlap", {"on_overlap": "sometimes"}),
        ("backfill", {"backfill": "never"}),
        ("max_runtime_ms", {"max_runtime_ms": 0}),
    ],
)
async def test_a_bad_write_names_its_field_and_writes_nothing(
    sqlite_url: str, field: str, changes: dict[str, Any]
) -> None:
    calls, clock = Calls(), ManualClock(T0)
    async with booted(sqlite_url, clock, calls) as scheduling:
        fields: dict[str, Any] = {
            "name": NAME,
            "cron": "* * * * *",
            "timezone": "UTC",
            "handler": "tenantReport",
            **changes,
        }
        name = fields.pop("name")
        with pytest.raises(InvalidScheduleError) as caught:
            await scheduling.put_schedule(name, **fields)
        assert caught.value.field == field
        assert f"): {field} — " in str(caught.value)
        assert await scheduling.running_store().definitions() == {}
        assert scheduling.get(str(name)) is None


async def test_a_name_declared_in_code_cannot_be_written_or_deleted(sqlite_url: str) -> None:
    async def daily(ctx: ScheduleContext) -> None:
        return None

    declared = define_schedule(name="daily", cron="0 3 * * *", timezone="UTC", handler=daily)
    calls, clock = Calls(), ManualClock(T0)
    async with booted(sqlite_url, clock, calls, schedules=[declared]) as scheduling:
        with pytest.raises(DeclaredInCodeError, match="declared in code"):
            await scheduling.put_schedule(
                "daily", cron="* * * * *", timezone="UTC", handler="tenantReport"
            )
        with pytest.raises(DeclaredInCodeError):
            await scheduling.delete_schedule("daily")
        versions = await scheduling.running_store().definitions()
        assert [v.source for v in versions["daily"]] == ["code"]
        assert scheduling.schedule("daily") is declared


# -- the write's round trips ----------------------------------------------------------------


def _statements(scheduling: Scheduling) -> list[str]:
    """Every SQL statement the scheduler's store sends from now on (first word and table)."""
    from sqlalchemy import event

    from fastapi_voltro_schedules.store.instrumented import sql_store_behind

    sent: list[str] = []
    store = sql_store_behind(scheduling.running_store())
    assert store is not None

    @event.listens_for(store.engine.sync_engine, "before_cursor_execute")
    def _seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "_voltro_schedule_definitions" in statement:
            sent.append(statement.split()[0].upper())

    return sent


async def test_a_write_is_one_insert_and_a_peer_ahead_of_this_replica_is_read_and_followed(
    sqlite_url: str,
) -> None:
    """A create or an edit on what this replica knows is one INSERT, no read of the versions
    (a put was three round trips: 10,000 tenants at 39 a second on Postgres). A peer's edit
    this replica has not followed yet takes the version number first: the INSERT records
    nothing, the table is read, the next number is written — nothing of the peer's is lost.
    A re-put of the definition in force is checked against the table, never from memory."""
    calls, clock = Calls(), ManualClock(T0)
    async with booted(sqlite_url, clock, calls) as scheduling:
        sent = _statements(scheduling)
        first = await put(scheduling, args={"v": 1})
        edited = await put(scheduling, args={"v": 2})
        assert (first.created, edited.created, edited.version.version) == (True, False, 2)
        assert sent == ["INSERT", "INSERT"]

        # a peer (another replica) records version 3 behind this replica's back
        store = scheduling.running_store()
        peer = replace(edited.version, version=3, args=json.dumps({"v": 3}), recorded_by="pod-2")
        assert await store.add_definitions([peer]) == 1
        sent.clear()
        mine = await put(scheduling, args={"v": 4})
        assert mine.changed and mine.version.version == 4
        assert sent == ["INSERT", "SELECT", "INSERT"]  # v3 taken: read, then v4
        stored = (await store.definitions([NAME]))[NAME]
        assert [(v.version, json.loads(v.args)) for v in stored] == [
            (4, {"v": 4}),
            (3, {"v": 3}),
            (2, {"v": 2}),
            (1, {"v": 1}),
        ]

        # the peer again: version 5 back to v=4's args; this replica still knows 4 (the
        # same definition), so a re-put of it is read first — and is a change after all
        peer = replace(mine.version, version=5, args=json.dumps({"v": 5}), recorded_by="pod-2")
        await store.add_definitions([peer])
        sent.clear()
        again = await put(scheduling, args={"v": 4})
        assert again.changed and again.version.version == 6
        assert sent == ["SELECT", "INSERT"]
        sent.clear()
        same = await put(scheduling, args={"v": 4})
        assert (same.changed, same.version.version) == (False, 6)
        assert sent == ["SELECT"]
