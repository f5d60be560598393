"""The external missed watcher, in process: when it looks, where it starts, what it records.

The watcher is driven pass by pass (``check()``) on a ManualClock over a SQLite ledger; the
two-replica behaviour over HTTP is in ``test_external_cluster.py``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from fastapi_voltro_schedules import Scheduling, SchedulingConfig, define_schedule
from fastapi_voltro_schedules.enums import CoordinationOutcome, RunStatus, Trigger
from fastapi_voltro_schedules.errors import StoreUnavailableError
from fastapi_voltro_schedules.external_missed import (
    MISSED_GRACE,
    ExternalMissedWatcher,
    watch_external_missed,
)
from fastapi_voltro_schedules.metrics import SchedulerMetrics
from fastapi_voltro_schedules.models import claim_key
from fastapi_voltro_schedules.store import RunRecord, SQLStore, create_store, new_run_id
from fastapi_voltro_schedules.testing import ManualClock

BOOT = datetime(2026, 3, 4, 8, 30, tzinfo=UTC)


async def noop(ctx: object) -> None:
    return None


HOURLY = define_schedule(
    name="hourly", cron="0 * * * *", timezone="UTC", trigger="external", handler=noop
)
MINUTELY = define_schedule(
    name="minutely", cron="* * * * *", timezone="UTC", trigger="external", handler=noop
)
SELF = define_schedule(name="selfJob", cron="0 * * * *", timezone="UTC", handler=noop)


@pytest.fixture
async def store(sqlite_url: str) -> AsyncIterator[SQLStore]:
    s = create_store(sqlite_url)
    assert isinstance(s, SQLStore)
    await s.create_schema()
    try:
        yield s
    finally:
        await s.dispose()


def make(
    store: SQLStore, clock: ManualClock, policy: str = "record", **config: object
) -> tuple[ExternalMissedWatcher, SchedulerMetrics]:
    scheduling = Scheduling(
        [HOURLY, MINUTELY, SELF],
        config=SchedulingConfig(external_missed_policy=policy, replica_id="r1", **config),
        clock=clock,
    )
    scheduling.store = store  # the pass needs only the store under "record"
    metrics = SchedulerMetrics(CollectorRegistry())
    return ExternalMissedWatcher(scheduling, [HOURLY, MINUTELY], metrics), metrics


async def missed(store: SQLStore, name: str) -> list[datetime]:
    rows = await store.list_runs(name, limit=5000)
    return sorted(r.scheduled_at for r in rows if r.status is RunStatus.MISSED)


def counted(metrics: SchedulerMetrics, name: str) -> float:
    return metrics.external_missed.labels(name=name)._value.get()


def at(hh: int, mm: int, ss: float = 0) -> datetime:
    return datetime(2026, 3, 4, hh, mm, tzinfo=UTC) + timedelta(seconds=ss)


async def test_an_occurrence_is_checked_two_seconds_after_its_window_closes(
    store: SQLStore,
) -> None:
    clock = ManualClock(BOOT)
    watcher, metrics = make(store, clock)
    assert await watcher.check()
    # hourly 09:00: an arrival can reach it until 09:05 (the 5-minute skew); looked at 2 s later
    clock.set(at(9, 5) + MISSED_GRACE - timedelta(milliseconds=1))
    await watcher.check()
    assert await missed(store, "hourly") == []
    clock.set(at(9, 5) + MISSED_GRACE)
    await watcher.check()
    assert await missed(store, "hourly") == [at(9, 0)]
    # minutely: the window of 09:04 closes at 09:05 (its period binds, not the skew)
    assert (await missed(store, "minutely"))[-1] == at(9, 4)
    assert (await missed(store, "minutely"))[0] == at(8, 31)  # from boot, not before
    assert counted(metrics, "hourly") == 1
    assert counted(metrics, "minutely") == 34
    # a second pass records nothing twice
    await watcher.check()
    assert await missed(store, "hourly") == [at(9, 0)]
    assert counted(metrics, "hourly") == 1


async def test_recorded_rows_are_external_missed_and_claimed(store: SQLStore) -> None:
    clock = ManualClock(BOOT)
    watcher, _ = make(store, clock)
    await watcher.check()
    clock.set(at(9, 10))
    await watcher.check()
    (row,) = [r for r in await store.list_runs("hourly") if r.scheduled_at == at(9, 0)]
    assert (row.status, row.trigger, row.coordination_outcome, row.replica_id) == (
        RunStatus.MISSED,
        Trigger.EXTERNAL,
        CoordinationOutcome.EXTERNAL,
        "r1",
    )
    assert row.fired_at is None and row.finished_at == at(9, 10)
    # the claim is held: a late arrival stating 09:00 is a duplicate of this row
    assert not await store.claim(claim_key("hourly", at(9, 0)), "r2", at(9, 20))
    assert await store.run_for_slot("hourly", at(9, 0), Trigger.EXTERNAL) == row


async def test_a_triggered_occurrence_is_not_missed(store: SQLStore) -> None:
    clock = ManualClock(BOOT)
    watcher, metrics = make(store, clock)
    await watcher.check()
    # an arrival claimed and ran 09:00
    assert await store.claim(claim_key("hourly", at(9, 0)), "r2", at(9, 1))
    await store.insert_run(
        RunRecord(
            id=new_run_id(),
            name="hourly",
            scheduled_at=at(9, 0),
            status=RunStatus.SUCCEEDED,
            trigger=Trigger.EXTERNAL,
            coordination_outcome=CoordinationOutcome.EXTERNAL,
            fired_at=at(9, 1),
            finished_at=at(9, 2),
            replica_id="r2",
        )
    )
    clock.set(at(10, 10))
    await watcher.check()
    assert await missed(store, "hourly") == [at(10, 0)]
    assert counted(metrics, "hourly") == 1


async def test_the_walk_starts_at_the_newest_row_and_is_capped(
    store: SQLStore, caplog: pytest.LogCaptureFixture
) -> None:
    # the newest row is 06:00, before this process booted: the downtime is reconciled too
    await store.insert_run(
        RunRecord(
            id=new_run_id(),
            name="hourly",
            scheduled_at=at(6, 0),
            status=RunStatus.SUCCEEDED,
            trigger=Trigger.EXTERNAL,
            coordination_outcome=CoordinationOutcome.EXTERNAL,
            replica_id="r0",
        )
    )
    # minutely's newest row is 2000 minutes back: only the newest 1000 are enumerated
    start = BOOT - timedelta(minutes=2000)
    await store.insert_run(
        RunRecord(
            id=new_run_id(),
            name="minutely",
            scheduled_at=start,
            status=RunStatus.SUCCEEDED,
            trigger=Trigger.EXTERNAL,
            coordination_outcome=CoordinationOutcome.EXTERNAL,
            replica_id="r0",
        )
    )
    clock = ManualClock(BOOT)
    watcher, metrics = make(store, clock)
    with caplog.at_level(logging.WARNING, logger="fastapi_voltro_schedules"):
        await watcher.check()
    assert await missed(store, "hourly") == [at(7, 0), at(8, 0)]
    minutes = await missed(store, "minutely")
    assert len(minutes) == 1000 and minutes[-1] == at(8, 28)  # 08:29 is still open
    assert counted(metrics, "minutely") == 1000
    assert "external missed walk capped  name=minutely slots=1000" in caplog.text


async def test_off_and_no_external_schedules_start_nothing(store: SQLStore) -> None:
    clock = ManualClock(BOOT)
    off = Scheduling([HOURLY], config=SchedulingConfig(external_missed_policy="off"), clock=clock)
    off.store = store
    await watch_external_missed(off)  # returns at once
    none = Scheduling([SELF], config=SchedulingConfig(), clock=clock)
    none.store = store
    await watch_external_missed(none)
    assert await store.list_runs(None) == []


class _DownStore:
    """A store whose database is gone: every call fails closed."""

    async def last_runs(self, names: object) -> dict[str, RunRecord]:
        raise StoreUnavailableError("store last_runs: connection refused")

    async def claim_many(self, *args: object) -> set[str]:
        raise StoreUnavailableError("store claim: connection refused")


async def test_a_store_failure_keeps_the_cursor(store: SQLStore) -> None:
    clock = ManualClock(BOOT)
    watcher, metrics = make(store, clock)
    await watcher.check()
    clock.set(at(9, 10))
    watcher.scheduling.store = cast(Any, _DownStore())
    assert await watcher.check() is False
    assert watcher.cursors["hourly"] == BOOT
    assert counted(metrics, "hourly") == 0
    watcher.scheduling.store = store  # back: the same occurrences are recorded now
    assert await watcher.check() is True
    assert await missed(store, "hourly") == [at(9, 0)]
