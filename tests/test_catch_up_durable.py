"""A ``backfill="all"`` catch-up is durable and shared (issue 29 items 2, 3 and 13).

* Item 2 — two replicas booting together after an outage (Postgres, MariaDB), ``on_overlap``
  left at ``skip``: before, they split the owed slots and a slot claimed while the other ran
  the one before was recorded ``skipped`` — real work never run. Now every owed slot joins the
  schedule's line with its row, so the replicas share the slots and run each once, in order,
  one at a time.
* Item 3 — a stop in the middle of a catch-up after a newer slot was recorded (every store):
  before, the unreached slots had no row at all (the next boot continued after the newer
  slot) and the audit reported the hole. Now each owed slot is recorded ``queued`` before any
  runs, and the next replica resumes them.
* Item 13 — a full-fleet stop longer than two periods with ``queue`` waiters in line: before,
  the next boot wrote them off ``missed/abandoned``; under ``backfill="all"`` they are resumed.

After each, the audit finds nothing owed without a row.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime

import pytest
from support.queue_lines import Line
from support.running import runs_of, seed_last_run
from support.waiting import wait_until

from fastapi_voltro_schedules import (
    RunStatus,
    Schedule,
    Scheduling,
    SchedulingConfig,
    Trigger,
    define_schedule,
)
from fastapi_voltro_schedules.audit import audit_ledger
from fastapi_voltro_schedules.store import RunRecord, create_store
from fastapi_voltro_schedules.testing import ManualClock

NAME = "nightly"
SERVERS = [
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("mariadb", marks=pytest.mark.mariadb),
]


def at(hour: int, minute: int) -> datetime:
    return datetime(2026, 6, 1, hour, minute, tzinfo=UTC)


def nightly(line: Line, on_overlap: str = "skip") -> Schedule:
    return define_schedule(
        name=NAME, cron="*/10 * * * *", timezone="UTC", on_overlap=on_overlap, backfill="all",
        max_runtime_ms=7_200_000, handler=line,
    )  # fmt: skip


@asynccontextmanager
async def replica(
    url: str, schedule: Schedule, replica_id: str, clock: ManualClock, **config: object
) -> AsyncIterator[Scheduling]:
    cfg = SchedulingConfig(database_url=url, replica_id=replica_id, **config)  # type: ignore[arg-type]
    scheduling = Scheduling([schedule], config=cfg, clock=clock)
    async with scheduling.run():
        yield scheduling


async def audit_clean(url: str, schedule: Schedule, start: datetime, end: datetime) -> None:
    store = create_store(url)
    try:
        report = await audit_ledger(store, [schedule], start, end, now=end)
    finally:
        await store.dispose()
    assert report.clean, report.text()


def by_slot(rows: list[RunRecord]) -> dict[datetime, list[RunRecord]]:
    found: dict[datetime, list[RunRecord]] = {}
    for row in rows:
        found.setdefault(row.scheduled_at, []).append(row)
    return found


async def each_succeeded_once(scheduling: Scheduling, slots: list[datetime]) -> bool:
    """Whether each of ``slots`` has exactly one row, ``succeeded``."""
    rows = by_slot(await runs_of(scheduling, NAME))
    return all([r.status for r in rows.get(slot, [])] == [RunStatus.SUCCEEDED] for slot in slots)


@pytest.mark.parametrize("server", SERVERS)
async def test_replicas_booting_together_share_an_all_catch_up_and_skip_none(
    server: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue(f"{server}_url")
    await seed_last_run(url, NAME, at(9, 0))
    line = Line()  # each run is real work of 50 ms: the two replicas' catch-ups overlap
    schedule = nightly(line)
    owed = [at(9, 10), at(9, 20), at(9, 30), at(9, 40)]
    async with AsyncExitStack() as stack:
        first = await stack.enter_async_context(
            replica(url, schedule, "pod-1", ManualClock(at(9, 45)))
        )
        await stack.enter_async_context(replica(url, schedule, "pod-2", ManualClock(at(9, 45))))

        async def all_succeeded() -> bool:
            rows = [r for r in await runs_of(first, NAME) if r.replica_id != "old"]
            return len(rows) == 4 and all(r.status is RunStatus.SUCCEEDED for r in rows)

        await wait_until(all_succeeded, what="the four owed slots to run")
        rows = [r for r in await runs_of(first, NAME) if r.replica_id != "old"]
    slots = by_slot(rows)
    assert sorted(slots) == owed
    assert all(len(found) == 1 for found in slots.values()), slots
    assert {r.status for r in rows} == {RunStatus.SUCCEEDED}  # none skipped
    ran = [slot for slot, _, _ in line.spans]
    assert ran == owed  # each once, in slot order
    for (_, _, end), (_, start, _) in zip(line.spans, line.spans[1:], strict=False):
        assert end is not None and end <= start  # one at a time
    await audit_clean(url, schedule, at(9, 0), at(9, 45))


async def test_a_stop_in_the_middle_of_a_catch_up_leaves_every_owed_slot_for_the_next_boot(
    database_url: str,
) -> None:
    await seed_last_run(database_url, NAME, at(9, 0))
    line = Line()
    line.hold = True
    schedule = nightly(line)
    clock = ManualClock(at(9, 45))
    async with replica(database_url, schedule, "pod-1", clock, shutdown_grace_ms=50) as first:
        await wait_until(lambda: [s for s, _, _ in line.spans] == [at(9, 10)], what="09:10")

        async def recorded(slot: datetime) -> bool:
            return any(r.scheduled_at == slot for r in await runs_of(first, NAME))

        # every owed slot is recorded before any later one runs …
        for slot in (at(9, 20), at(9, 30), at(9, 40)):
            assert await recorded(slot), slot
        # … and a newer slot is recorded while 09:10 still runs (skipped: one is in flight)
        await clock.advance(5 * 60)
        await wait_until(lambda: recorded(at(9, 50)), what="the live 09:50")
    # pod-1 stopped: 09:10 was cut short; 09:20–09:40 never ran
    assert [s for s, _, _ in line.spans] == [at(9, 10)]

    line.hold = False
    later = ManualClock(at(9, 55))
    async with replica(database_url, schedule, "pod-2", later) as second:

        await wait_until(
            lambda: each_succeeded_once(second, [at(9, 20), at(9, 30), at(9, 40)]),
            what="09:20, 09:30 and 09:40 to run on pod-2",
        )
        rows = await runs_of(second, NAME)
    slots = by_slot(rows)
    for slot in (at(9, 20), at(9, 30), at(9, 40)):
        (row,) = slots[slot]
        assert row.replica_id == "pod-2" and row.trigger is Trigger.SELF
    assert [s for s, _, _ in line.spans] == [at(9, 10), at(9, 20), at(9, 30), at(9, 40)]
    assert Counter(s for s, _, _ in line.spans).most_common(1)[0][1] == 1
    assert not [r for r in rows if r.status is RunStatus.QUEUED]
    await audit_clean(database_url, schedule, at(9, 0), at(9, 55))


@pytest.mark.parametrize("server", SERVERS)
async def test_a_full_fleet_stop_resumes_the_queue_line_under_backfill_all(
    server: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue(f"{server}_url")
    await seed_last_run(url, NAME, at(9, 0))
    line = Line()
    line.hold = True
    schedule = nightly(line, on_overlap="queue")
    clock = ManualClock(at(9, 5))
    async with replica(url, schedule, "pod-1", clock, shutdown_grace_ms=50) as first:
        await clock.advance(5 * 60)
        await wait_until(lambda: [s for s, _, _ in line.spans] == [at(9, 10)], what="09:10")
        await clock.advance(20 * 60)

        async def in_line() -> bool:
            rows = await runs_of(first, NAME)
            waiting = [r.scheduled_at for r in rows if r.status is RunStatus.QUEUED]
            return waiting == [at(9, 20), at(9, 30)]

        await wait_until(in_line, what="09:20 and 09:30 in line")
    # The whole fleet was down for 45 minutes (more than two periods).
    line.hold = False
    async with replica(url, schedule, "pod-2", ManualClock(at(10, 15))) as second:
        owed = [at(9, 20), at(9, 30), at(9, 40), at(9, 50), at(10, 0), at(10, 10)]

        await wait_until(
            lambda: each_succeeded_once(second, owed), what="the line and the downtime to run"
        )
        rows = await runs_of(second, NAME)
    assert not [r for r in rows if r.status is RunStatus.MISSED]
    assert [s for s, _, _ in line.spans] == [at(9, 10), *owed]
    await audit_clean(url, schedule, at(9, 0), at(10, 15))
