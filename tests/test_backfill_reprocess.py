"""Range backfill's ``reprocess`` and dry run, in process, on SQLite and Postgres.

What each slot of a range becomes is decided from what the ledger says of it (the pure table
below); a dry run reads that and writes nothing (rows counted before and after); ``failed``
re-runs only the failed and missed slots, each re-run a new ``manual`` row beside the one it
re-ran (the history stays, the audit stays clean); and two backfills of one range on one
Postgres database run each slot once, because each step is elected by a claim.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
from conftest import clean_server
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import create_async_engine

from fastapi_voltro_schedules import (
    RunStatus,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    Trigger,
    define_schedule,
)
from fastapi_voltro_schedules.audit import audit_ledger
from fastapi_voltro_schedules.backfill import step_claim
from fastapi_voltro_schedules.errors import (
    BackfillRefusedError,
    BackfillRequestError,
    SchedulePausedError,
)
from fastapi_voltro_schedules.fire_requests import FireRequest, Why
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.models import claims_table, rerun_claim_key, runs_table
from fastapi_voltro_schedules.planning import SlotAction, plan_reprocess
from fastapi_voltro_schedules.store import RunRecord, new_run_id
from fastapi_voltro_schedules.testing import ManualClock

NAME = "hourly-sync"
NOW = datetime(2026, 8, 12, 12, 0, tzinfo=UTC)
FROM = "2026-08-10T00:00:00Z"
BASE = datetime(2026, 8, 10, tzinfo=UTC)


def slot(n: int) -> datetime:
    return BASE + timedelta(hours=n)


def hours(n: int) -> str:
    return slot(n).isoformat()


def row(n: int, status: RunStatus, trigger: Trigger = Trigger.SELF) -> RunRecord:
    return RunRecord(
        id=new_run_id(),
        name=NAME,
        scheduled_at=slot(n),
        status=status,
        trigger=trigger,
        fired_at=None if status is RunStatus.MISSED else slot(n),
        finished_at=slot(n),
        replica_id="old",
    )


# --- the pure decision ----------------------------------------------------------------------

S, F, M, K = RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.MISSED, RunStatus.SKIPPED
RUN, RERUN, KEEP, BUSY = (
    SlotAction.RUN,
    SlotAction.RERUN,
    SlotAction.KEEP,
    SlotAction.IN_PROGRESS,
)


@pytest.mark.parametrize(
    ("statuses", "none", "failed", "all_"),
    [
        ((), RUN, RUN, RUN),  # nothing recorded: every policy runs it
        ((S,), KEEP, KEEP, RERUN),
        ((F,), KEEP, RERUN, RERUN),
        ((M,), KEEP, RERUN, RERUN),
        ((K,), KEEP, KEEP, RERUN),  # its own overlap rule stood it down
        ((RunStatus.RUNNING,), BUSY, BUSY, BUSY),
        ((RunStatus.QUEUED,), BUSY, BUSY, BUSY),
        ((F, S), KEEP, KEEP, RERUN),  # re-run and succeeded: the newer row says so
        ((S, F), KEEP, RERUN, RERUN),  # succeeded, then a re-run that failed
        ((M, S), KEEP, KEEP, RERUN),  # a missed slot that ran after all
        ((S, M), KEEP, KEEP, RERUN),  # an external slot's missed row beside its run
        ((F, RunStatus.RUNNING), BUSY, BUSY, BUSY),
    ],
)
def test_what_each_slot_becomes(
    statuses: tuple[RunStatus, ...], none: SlotAction, failed: SlotAction, all_: SlotAction
) -> None:
    rows = [row(1, status) for status in statuses]  # ids in creation order: oldest first
    for policy, expected in (("none", none), ("failed", failed), ("all", all_)):
        (plan,) = plan_reprocess([slot(1)], rows, policy)
        assert plan.action is expected, (policy, statuses)
        assert plan.rows == len(rows)
        if rows:
            assert plan.current is not None and plan.status is plan.current.status


def test_rows_at_other_instants_are_no_slots() -> None:
    run_now = replace(row(1, S, Trigger.MANUAL), scheduled_at=slot(1) + timedelta(minutes=7))
    (plan,) = plan_reprocess([slot(1)], [run_now], "none")
    assert (plan.status, plan.action) == (None, SlotAction.RUN)


def test_a_rerun_claims_a_key_naming_the_row_it_reruns() -> None:
    first, second = new_run_id(), new_run_id()
    key = rerun_claim_key(NAME, slot(1), first)
    assert key.startswith(f"{NAME}@2026-08-10T01:00:00~") and len(key) <= 255
    assert key == rerun_claim_key(NAME, slot(1), first)  # two backfills: the same key
    assert key != rerun_claim_key(NAME, slot(1), second)  # a later re-run: a new one
    assert len(rerun_claim_key("n" * 200, slot(1), first)) <= 255


# --- against a ledger -----------------------------------------------------------------------


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
        pytest.param("mariadb", id="mariadb", marks=pytest.mark.mariadb),
    ]
)
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'voltro.db'}"
        return
    with clean_server(request.param) as url:
        yield url


class Calls:
    """Every execution of the handler, by slot and replica: the side effect counted."""

    def __init__(self) -> None:
        self.seen: list[tuple[datetime, str]] = []

    def handler(self, replica: str) -> Callable[[ScheduleContext], Awaitable[None]]:
        async def run(ctx: ScheduleContext) -> None:
            self.seen.append((ctx.scheduled_at, replica))
            await anyio.lowlevel.checkpoint()  # the other backfill's step may come between

        return run

    def slots(self) -> list[datetime]:
        return sorted(at for at, _ in self.seen)


def scheduling(url: str, calls: Calls, replica: str = "ops") -> Scheduling:
    hourly = define_schedule(
        name=NAME, cron="0 * * * *", timezone="UTC", handler=calls.handler(replica)
    )
    return Scheduling(
        [hourly],
        config=SchedulingConfig(database_url=url, replica_id=replica),
        clock=ManualClock(NOW),
    )


async def counts(url: str) -> tuple[int, int]:
    """Rows of the runs and the claims tables."""
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            runs = (await conn.execute(select(func.count()).select_from(runs_table))).scalar_one()
            claims = (
                await conn.execute(select(func.count()).select_from(claims_table))
            ).scalar_one()
    finally:
        await engine.dispose()
    return int(runs), int(claims)


SEEDED = {1: S, 2: F, 3: M, 4: K}
"""Slots 1–4 of the range with a clock-driven outcome; 5 and 6 have nothing recorded."""


@pytest.fixture
async def seeded(ledger_url: str) -> AsyncIterator[str]:
    if not ledger_url.startswith("sqlite"):
        await upgrade_to_head(ledger_url)
    calls = Calls()
    async with scheduling(ledger_url, calls).run(arm=False) as s:
        assert s.store is not None
        await s.store.insert_runs([row(n, status) for n, status in SEEDED.items()])
    yield ledger_url


async def audit_clean(s: Scheduling) -> None:
    assert s.store is not None
    report = await audit_ledger(
        s.store, s.schedules, slot(0), slot(10), heartbeat_ms=s.config.schedule_heartbeat_ms,
        now=NOW,
    )  # fmt: skip
    assert report.clean, report.text()
    assert report.rows > 0


async def test_a_dry_run_lists_each_slot_and_writes_nothing(seeded: str) -> None:
    calls = Calls()
    before = await counts(seeded)
    async with scheduling(seeded, calls).run(arm=False) as s:
        summary = await s.backfill(NAME, FROM, hours(6), reprocess="failed", dry_run=True)
        # A dry run of more than 25 slots asks nothing: it fires nothing.
        big = await s.backfill(NAME, FROM, hours(40), reprocess="all", dry_run=True)
    assert await counts(seeded) == before
    assert calls.seen == []
    assert summary.dry_run and (summary.fired, summary.to_run, summary.kept) == (0, 4, 2)
    assert [(p.slot, p.status, p.action) for p in summary.states] == [
        (slot(1), S, SlotAction.KEEP),
        (slot(2), F, SlotAction.RERUN),
        (slot(3), M, SlotAction.RERUN),
        (slot(4), K, SlotAction.KEEP),
        (slot(5), None, SlotAction.RUN),
        (slot(6), None, SlotAction.RUN),
    ]
    assert summary.already_succeeded == 1
    assert (big.count, big.to_run) == (40, 40)

    # Paused, a dry run still answers (it only reads); the backfill itself is refused.
    async with scheduling(seeded, calls).run(arm=False) as s:
        await s.pause(NAME, by="operator", reason="look first")
        looked = await s.backfill(NAME, FROM, hours(6), dry_run=True)
        assert (looked.to_run, looked.fired) == (2, 0)
        with pytest.raises(SchedulePausedError):
            await s.backfill(NAME, FROM, hours(6))
        await s.resume(NAME, by="operator")
    assert calls.seen == []


async def test_reprocess_failed_reruns_only_the_failed_and_missed_slots(seeded: str) -> None:
    calls = Calls()
    async with scheduling(seeded, calls).run(arm=False) as s:
        summary = await s.backfill(NAME, FROM, hours(6), reprocess="failed")
        assert calls.slots() == [slot(2), slot(3), slot(5), slot(6)]
        assert (summary.fired, summary.succeeded, summary.kept, summary.taken) == (4, 4, 2, 0)
        assert s.store is not None
        rows = await s.store.list_runs(NAME, limit=100)
        by_slot: dict[datetime, list[RunRecord]] = {}
        for r in rows:
            by_slot.setdefault(r.scheduled_at, []).append(r)
        # One new manual row per slot run; the outcome it re-ran is kept beside it.
        assert sorted((r.trigger, r.status) for r in by_slot[slot(2)]) == [
            (Trigger.MANUAL, S),
            (Trigger.SELF, F),
        ]
        assert sorted((r.trigger, r.status) for r in by_slot[slot(3)]) == [
            (Trigger.MANUAL, S),
            (Trigger.SELF, M),
        ]
        assert [(r.trigger, r.status) for r in by_slot[slot(5)]] == [(Trigger.MANUAL, S)]
        assert [(r.trigger, r.status) for r in by_slot[slot(1)]] == [(Trigger.SELF, S)]
        assert [(r.trigger, r.status) for r in by_slot[slot(4)]] == [(Trigger.SELF, K)]

        # Again: every failed and missed slot has succeeded since — nothing runs.
        again = await s.backfill(NAME, FROM, hours(6), reprocess="failed")
        assert (again.fired, again.kept, again.already_succeeded) == (0, 6, 5)
        assert len(calls.seen) == 4
        # `all` runs every slot once more, the skipped one too.
        every = await s.backfill(NAME, FROM, hours(6), reprocess="all")
        assert every.fired == 6
        assert Counter(calls.slots()) == Counter([slot(n) for n in (1, 2, 2, 3, 3, 4, 5, 5, 6, 6)])
        await audit_clean(s)


async def test_a_bad_reprocess_names_the_field(sqlite_url: str) -> None:
    async with scheduling(sqlite_url, Calls()).run(arm=False) as s:
        with pytest.raises(BackfillRequestError, match=r"reprocess='some'.*none, failed, all"):
            await s.backfill(NAME, FROM, hours(2), reprocess="some")


# --- two operators, one range, one Postgres database ----------------------------------------


@pytest.fixture
async def shared_postgres() -> AsyncIterator[str]:
    with clean_server("postgres") as url:
        await upgrade_to_head(url)
        yield url


@pytest.mark.postgres
async def test_two_concurrent_backfills_of_one_range_run_each_slot_once(
    shared_postgres: str,
) -> None:
    url = shared_postgres
    calls = Calls()
    async with scheduling(url, Calls()).run(arm=False) as seed:
        assert seed.store is not None
        await seed.store.insert_runs([row(n, status) for n, status in SEEDED.items()])
    a, b = scheduling(url, calls, "ops-a"), scheduling(url, calls, "ops-b")
    outcomes: dict[str, object] = {}

    async def backfill(s: Scheduling, who: str) -> None:
        try:
            outcomes[who] = await s.backfill(NAME, FROM, hours(12), reprocess="failed")
        except BackfillRefusedError as refused:  # the other's range holds the lock
            outcomes[who] = refused.reason

    async with a.run(arm=False), b.run(arm=False), anyio.create_task_group() as tg:
        tg.start_soon(backfill, a, "a")
        tg.start_soon(backfill, b, "b")
    # Slots 2, 3 (failed, missed) and 5..12 (nothing recorded), each run once, by one of them.
    expected = [slot(n) for n in (2, 3, *range(5, 13))]
    assert calls.slots() == expected, (calls.seen, outcomes)
    assert set(outcomes) == {"a", "b"}

    # Beneath the lock, the claims: both plan the same range before either runs, then fire
    # every step of both plans at once — as two ranges would if one's lock were taken over
    # while it still ran. Each slot runs once; the loser of each claim runs nothing.
    async with a.run(arm=False), b.run(arm=False):
        plans = [
            await s.plan_backfill(NAME, FROM, hours(16), reprocess="all", confirm=True)
            for s in (a, b)
        ]
        assert [p.to_run for p in plans] == [16, 16]
        statuses: list[RunStatus | None] = []

        async def fire_plan(s: Scheduling, index: int) -> None:
            engine = s.running_engine()
            schedule = s.schedule(NAME)
            for state in plans[index].firing:
                claim = step_claim(NAME, state)
                step = await engine.fire(FireRequest(schedule, state.slot, Why.RANGE, claim=claim))
                statuses.append(await step.finished())

        before = len(calls.seen)
        async with anyio.create_task_group() as tg:
            tg.start_soon(fire_plan, a, 0)
            tg.start_soon(fire_plan, b, 1)
        ran = calls.seen[before:]
        assert sorted(at for at, _ in ran) == [slot(n) for n in range(1, 17)], ran
        assert statuses.count(None) == 16 and len(statuses) == 32
        assert a.store is not None
        report = await audit_ledger(a.store, a.schedules, slot(0), slot(20), now=NOW)
        assert report.clean, report.text()
