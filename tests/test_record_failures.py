"""``record="failures"`` (issue 35): a ledger that stays small where the user wants it.

A success of such a schedule's clock-driven run is counted in its slot's hour
(``_voltro_schedule_rollups``) once a newer success replaces it; the schedule's newest success
stays a row (what catch-up, a takeover and the missed watcher read as "the last slot that
ran"). Failures, skips, misses and manual runs keep their rows; claims elect every slot as
before. On every store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import func, select
from support.stores import open_store

from fastapi_voltro_schedules.enums import CoordinationOutcome, RunStatus, Trigger
from fastapi_voltro_schedules.models import claim_key, claims_table, rollups_table, runs_table
from fastapi_voltro_schedules.records import ROLLED_UP_TAG, RollupRecord
from fastapi_voltro_schedules.store import RunOutcome, RunRecord, SQLStore, new_run_id
from fastapi_voltro_schedules.store.statements.rollups import ROLLED_UP_HOLDER

T0 = datetime(2026, 5, 28, 9, 0, tzinfo=UTC)
ME = "replica-a"

STORE_PARAMS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    pytest.param("mariadb", id="mariadb", marks=pytest.mark.mariadb),
]
_URL_FIXTURE = {"sqlite": "sqlite_url", "postgres": "postgres_url", "mariadb": "mariadb_url"}


@pytest.fixture(params=STORE_PARAMS)
async def store(request: pytest.FixtureRequest) -> AsyncIterator[SQLStore]:
    url: str = request.getfixturevalue(_URL_FIXTURE[request.param])
    async with open_store(url) as s:
        yield s


def running(name: str, at: datetime, trigger: Trigger = Trigger.SELF) -> RunRecord:
    return RunRecord(
        id=new_run_id(),
        name=name,
        scheduled_at=at,
        status=RunStatus.RUNNING,
        trigger=trigger,
        coordination_outcome=CoordinationOutcome.SINGLE,
        fired_at=at,
        replica_id=ME,
    )


def ended(run: RunRecord, status: RunStatus, took_ms: int, **kw: Any) -> RunOutcome:
    return RunOutcome(
        run_id=run.id,
        status=status,
        finished_at=run.scheduled_at + timedelta(milliseconds=took_ms),
        name=run.name,
        trigger=run.trigger,
        scheduled_at=run.scheduled_at,
        fired_at=run.fired_at,
        roll_up=status is RunStatus.SUCCEEDED and run.trigger is not Trigger.MANUAL,
        **kw,
    )


async def fire(store: SQLStore, run: RunRecord) -> None:
    """What the engine does: the slot's claim and its ``running`` row in one transaction."""
    won = await store.claim_and_insert([run], ME, run.scheduled_at)
    assert won == {run.id}


async def count(store: SQLStore, table: Any, *where: Any) -> int:
    async with store.engine.connect() as conn:
        return int(
            (await conn.execute(select(func.count()).select_from(table).where(*where))).scalar_one()
        )


async def test_n_successes_leave_the_newest_row_and_the_rest_counted_per_hour(
    store: SQLStore,
) -> None:
    # 90 one-minute slots across two hours, each finishing alone (the steady case)
    slots = [T0 + timedelta(minutes=i) for i in range(90)]
    for i, at in enumerate(slots):
        run = running("tick", at)
        await fire(store, run)
        await store.finish_runs([ended(run, RunStatus.SUCCEEDED, took_ms=100 + i)], ME)
    rows = await store.list_runs("tick", limit=1000)
    assert [(r.scheduled_at, r.status, r.error_tag) for r in rows] == [
        (slots[-1], RunStatus.SUCCEEDED, ROLLED_UP_TAG)
    ]
    hours = await store.rollups(["tick"], T0, T0 + timedelta(hours=2))
    assert hours == [
        # the second hour's last slot is still the kept row: 29 of its 30 are counted
        RollupRecord("tick", T0 + timedelta(hours=1), 29, sum(range(160, 189)), 188),
        RollupRecord("tick", T0, 60, sum(range(100, 160)), 159),
    ]
    # the newest row is what catch-up, takeovers and the listing read
    last = await store.last_run("tick")
    assert last is not None and last.scheduled_at == slots[-1]
    outcome = (await store.outcomes(["tick"]))["tick"]
    assert outcome.scheduled_at == slots[-1] and outcome.status is RunStatus.SUCCEEDED
    # every folded slot's claim is still there (a late replica still loses it), held by the
    # rollup so the sweep of claims without rows leaves it be
    folded = [claim_key("tick", at) for at in slots[:-1]]
    assert await count(store, claims_table, claims_table.c.key.in_(folded)) == 89
    assert await count(store, claims_table, claims_table.c.replica_id == ROLLED_UP_HOLDER) == 89
    assert not await store.claim(claim_key("tick", slots[3]), "replica-b", slots[3])
    found, _ = await store.rowless_claims(T0 - timedelta(days=1), T0 + timedelta(days=1), 1000)
    assert found == []


async def test_failures_skips_and_manual_runs_keep_their_rows(store: SQLStore) -> None:
    ok1, bad, ok2 = (running("mixed", T0 + timedelta(minutes=i)) for i in range(3))
    manual = running("mixed", T0 + timedelta(minutes=1, seconds=30), Trigger.MANUAL)
    for run in (ok1, bad, ok2):
        await fire(store, run)
    await store.insert_runs([manual])
    await store.finish_runs([ended(ok1, RunStatus.SUCCEEDED, 10)], ME)
    await store.finish_runs(
        [ended(bad, RunStatus.FAILED, 20, error_tag="ValueError", error_message="boom")], ME
    )
    await store.finish_runs([ended(manual, RunStatus.SUCCEEDED, 5)], ME)
    await store.finish_runs([ended(ok2, RunStatus.SUCCEEDED, 30)], ME)
    rows = sorted(await store.list_runs("mixed", limit=100), key=lambda r: r.scheduled_at)
    assert [(r.id, r.status, r.error_tag) for r in rows] == [
        (bad.id, RunStatus.FAILED, "ValueError"),
        (manual.id, RunStatus.SUCCEEDED, None),
        (ok2.id, RunStatus.SUCCEEDED, ROLLED_UP_TAG),
    ]
    assert await store.rollups(["mixed"], T0, T0) == [RollupRecord("mixed", T0, 1, 10, 10)]


async def test_a_herds_batch_folds_each_schedule_once_and_a_retry_folds_nothing_twice(
    store: SQLStore,
) -> None:
    # two herds of three schedules, each herd's outcomes in one batch (the timer's herd)
    names = ["a", "b", "c"]
    first = [running(n, T0) for n in names]
    second = [running(n, T0 + timedelta(minutes=1)) for n in names]
    for herd in (first, second):
        await store.claim_and_insert(herd, ME, herd[0].scheduled_at)
        batch = [ended(r, RunStatus.SUCCEEDED, 50) for r in herd]
        await store.finish_runs(batch, ME)
    # the same batch again (a finish retried after its commit was lost): nothing moves
    await store.finish_runs(batch, ME)
    assert await count(store, runs_table) == 3
    assert await store.rollups(None, T0, T0) == [RollupRecord(n, T0, 1, 50, 50) for n in names]


async def test_a_success_of_a_schedule_recording_all_is_a_row_as_before(store: SQLStore) -> None:
    runs = [running("all", T0 + timedelta(minutes=i)) for i in range(3)]
    for run in runs:
        await fire(store, run)
        await store.finish_runs(
            [RunOutcome(run.id, RunStatus.SUCCEEDED, run.scheduled_at, name=run.name)], ME
        )
    assert len(await store.list_runs("all")) == 3
    assert await count(store, rollups_table) == 0


async def test_retention_prunes_old_hours(store: SQLStore) -> None:
    for i in range(3):  # three hours, two slots each: one counted per hour, the last kept
        for j in range(2):
            run = running("hourly", T0 + timedelta(hours=i, minutes=j))
            await fire(store, run)
            await store.finish_runs([ended(run, RunStatus.SUCCEEDED, 1)], ME)
    assert [r.hour for r in await store.rollups(["hourly"], T0, T0 + timedelta(hours=3))] == [
        T0 + timedelta(hours=2),
        T0 + timedelta(hours=1),
        T0,
    ]
    assert await store.sweep_rollups(T0 + timedelta(hours=2), limit=1) == 1
    assert await store.sweep_rollups(T0 + timedelta(hours=2), limit=100) == 1
    assert [r.hour for r in await store.rollups(None, T0, T0 + timedelta(hours=3))] == [
        T0 + timedelta(hours=2)
    ]
