"""Slots written off together are written together: many schedules falling behind at one
instant, or caught up at boot, record their ``missed`` rows in one insert — not one
transaction per schedule. At 10,000 schedules the per-schedule writes (10,000 serial SQLite
transactions, each queued behind the last) left every live herd waiting on the store: `bench
steady --n 10000` achieved 0% on SQLite from 737dc3a on (bench/README.md, "One door")."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest
from support.running import running, runs_of, seed_last_run
from support.waiting import wait_until

from fastapi_voltro_schedules import RunStatus, ScheduleContext, define_schedule
from fastapi_voltro_schedules.store import RunRecord
from fastapi_voltro_schedules.store.instrumented import InstrumentedStore
from fastapi_voltro_schedules.testing import ManualClock

T0 = datetime(2026, 6, 1, 11, 59, 30, tzinfo=UTC)
N = 40


async def noop(ctx: ScheduleContext) -> None:
    return None


def schedules() -> list:  # type: ignore[type-arg]
    return [
        define_schedule(name=f"m{i:02d}", cron="* * * * *", timezone="UTC", handler=noop)
        for i in range(N)
    ]


@pytest.fixture
def missed_writes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many ``missed`` rows each insert carried (inserts without one are not counted)."""
    seen: list[int] = []
    insert = InstrumentedStore.insert_runs

    async def counted(self: InstrumentedStore, runs: Sequence[RunRecord]) -> None:
        missed = sum(r.status is RunStatus.MISSED for r in runs)
        if missed:
            seen.append(missed)
        await insert(self, runs)

    monkeypatch.setattr(InstrumentedStore, "insert_runs", counted)
    return seen


async def test_schedules_falling_behind_together_record_their_missed_slots_in_one_write(
    sqlite_url: str, missed_writes: list[int]
) -> None:
    clock = ManualClock(T0)
    async with running(schedules(), sqlite_url, clock) as s:
        await clock.advance(30 + 180)  # one wake, 12:03:00: 12:00–12:03 passed for every one

        async def accounted() -> bool:
            rows = [r for i in range(N) for r in await runs_of(s, f"m{i:02d}")]
            return len(rows) == 4 * N and all(r.status.terminal for r in rows)

        await wait_until(accounted, what="every slot of every schedule recorded")
        rows = [r for i in range(N) for r in await runs_of(s, f"m{i:02d}")]
    # backfill="skip": the newest runs, the three before it are written off
    assert sum(r.status is RunStatus.MISSED for r in rows) == 3 * N
    assert sum(r.status is RunStatus.SUCCEEDED for r in rows) == N
    assert missed_writes == [3 * N]


async def test_a_boot_catching_up_many_schedules_records_their_missed_slots_in_one_write(
    sqlite_url: str, missed_writes: list[int]
) -> None:
    down = datetime(2026, 6, 1, 11, 0, tzinfo=UTC)
    for i in range(N):
        await seed_last_run(sqlite_url, f"m{i:02d}", down)
    clock = ManualClock(datetime(2026, 6, 1, 11, 5, 30, tzinfo=UTC))
    async with running(schedules(), sqlite_url, clock) as s:
        rows = [r for i in range(N) for r in await runs_of(s, f"m{i:02d}")]
    # 11:01–11:05 passed while down: all recorded missed (skip) before the timer armed
    assert sum(r.status is RunStatus.MISSED for r in rows) == 5 * N
    assert missed_writes == [5 * N]
    assert {r.scheduled_at for r in rows if r.status is RunStatus.MISSED} == {
        down + timedelta(minutes=m) for m in range(1, 6)
    }
