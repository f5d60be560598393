"""Run-time schedules under ``coordination="cluster"`` (issue 31): a schedule written on one
replica is owned by exactly one member, fires once per slot across the replicas, follows its
edits and its delete wherever they were written, and moves with its lease.

Two schedulers share one Postgres or MariaDB ledger, each on a manual clock of its own that the
test moves together. The name is chosen so that rendezvous gives it to ``pod-b`` while every
write is made on ``pod-a``: the put, the edit and the delete must each *reach* the owner.
Freezing ``pod-b``'s clock stops its beats; once its lease has expired (on the database's
clock: the lease lasts two beats of real time, so the beat here is short) ``pod-a`` takes the
schedule over and fires it. Thawed, ``pod-b`` rejoins and rendezvous hands the schedule back —
a second handover. The audit finds nothing owed and nothing twice.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime, timedelta

import pytest
from support.running import runs_of
from support.waiting import wait_until

from fastapi_voltro_schedules import (
    RunStatus,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_handler,
)
from fastapi_voltro_schedules.audit import audit_ledger
from fastapi_voltro_schedules.coordination.cluster import owner_of
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.store import RunRecord, create_store
from fastapi_voltro_schedules.testing import ManualClock

pytestmark = [
    pytest.mark.slow,
    pytest.mark.parametrize(
        "server",
        [
            pytest.param("postgres", marks=pytest.mark.postgres),
            pytest.param("mariadb", marks=pytest.mark.mariadb),
        ],
    ),
]

T0 = datetime(2026, 6, 1, 10, 0, 5, tzinfo=UTC)
HEARTBEAT_MS = 3_000
"""A lease lasts two beats of the database's (real) clock: 6 s to wait out at the takeover,
and room enough that a beat on a busy machine is never late for its own lease."""
PODS = ("pod-a", "pod-b")
NAME = next(f"report.{i}" for i in range(100) if owner_of(f"report.{i}", PODS) == "pod-b")
"""Owned by ``pod-b`` while both are members; every write is made on ``pod-a``."""

seen: list[datetime] = []


@define_handler(name="tenantReport")
async def tenant_report(ctx: ScheduleContext) -> None:
    seen.append(ctx.scheduled_at)


def at(minute: int, second: int = 0) -> datetime:
    return datetime(2026, 6, 1, 10, minute, second, tzinfo=UTC)


@asynccontextmanager
async def replicas(url: str) -> AsyncIterator[tuple[Scheduling, Scheduling]]:
    await upgrade_to_head(url)
    async with AsyncExitStack() as stack:
        pair = []
        for replica in PODS:
            config = SchedulingConfig(
                database_url=url,
                replica_id=replica,
                coordination="cluster",
                schedule_heartbeat_ms=HEARTBEAT_MS,
                shutdown_grace_ms=200,
            )
            scheduling = Scheduling(config=config, clock=ManualClock(T0), handlers=[tenant_report])
            pair.append(await stack.enter_async_context(scheduling.run()))
        yield pair[0], pair[1]


def clock_of(scheduling: Scheduling) -> ManualClock:
    assert isinstance(scheduling.clock, ManualClock)
    return scheduling.clock


async def move(clocks: list[ManualClock], instant: datetime) -> None:
    """Move ``clocks`` to ``instant`` together, a beat at a time: every loop on them runs each
    beat, as in real time, and no replica falls silent (its lease lapses in real time) while
    the other's clock runs ahead."""
    while any(clock.now() < instant for clock in clocks):
        for clock in clocks:
            step = min(HEARTBEAT_MS / 1000, (instant - clock.now()).total_seconds())
            if step > 0:
                await clock.advance(step)


async def beat(*schedulings: Scheduling) -> None:
    for scheduling in schedulings:
        await clock_of(scheduling).advance(HEARTBEAT_MS / 1000)


def holds(scheduling: Scheduling) -> bool:
    engine = scheduling.running_engine()
    assert engine.membership is not None
    return NAME in engine.membership.gate.held


def members(scheduling: Scheduling) -> list[str]:
    engine = scheduling.running_engine()
    assert engine.membership is not None
    return engine.membership.members


async def fire(scheduling: Scheduling, on: list[ManualClock], slots: list[datetime]) -> None:
    """Move the clocks ``on`` to each of ``slots`` in turn, and wait until it is recorded
    before moving on: a run still in flight while a clock ran three beats past it would read
    dead to that replica's reaper (the clock moves faster than the run's real I/O)."""
    done = [r.scheduled_at for r in await runs_of(scheduling, NAME)]
    for slot in slots:
        await move(on, slot)
        done.append(slot)
        await settled(scheduling, list(done))


async def settled(scheduling: Scheduling, slots: list[datetime]) -> list[RunRecord]:
    """Once ``NAME``'s rows are exactly ``slots``, all terminal."""

    async def ready() -> list[RunRecord] | None:
        rows = await runs_of(scheduling, NAME)
        done = [r.scheduled_at for r in rows] == slots and all(r.status.terminal for r in rows)
        return rows if done else None

    rows: list[RunRecord] = await wait_until(ready, what=f"{NAME} rows at {slots}")
    return rows


@pytest.fixture
def server_url(request: pytest.FixtureRequest, server: str) -> str:
    return str(request.getfixturevalue(f"{server}_url"))


async def test_a_written_schedule_has_one_owner_follows_its_writes_and_moves_with_its_lease(
    server_url: str,
) -> None:
    seen.clear()
    async with replicas(server_url) as (a, b):
        both = [clock_of(a), clock_of(b)]

        async def joined() -> bool:
            await beat(a, b)
            return members(a) == members(b) == list(PODS)

        await wait_until(joined, what="both replicas members of the cluster", interval=0.1)

        # -- a put on a: owned by b, which learns of it at its next read ---------------------
        await a.put_schedule(NAME, cron="* * * * *", timezone="UTC", handler="tenantReport")

        async def b_owns() -> bool:
            await beat(a, b)
            return holds(b) and not holds(a)

        await wait_until(b_owns, what=f"pod-b owning {NAME}", interval=0.1)
        expected = [at(1), at(2), at(3)]
        await fire(a, both, expected)
        rows = await settled(a, expected)
        assert {r.replica_id for r in rows} == {"pod-b"}

        # -- an edit on a reaches b: every other minute from 10:03:30 ------------------------
        await move(both, at(3, 30))
        await a.put_schedule(NAME, cron="*/2 * * * *", timezone="UTC", handler="tenantReport")

        async def b_edited() -> bool:
            await beat(a, b)
            schedule = b.get(NAME)
            return schedule is not None and schedule.cron == "*/2 * * * *"

        await wait_until(b_edited, what="pod-b running the edit", interval=0.1)
        await fire(a, both, [at(4), at(6)])
        expected += [at(4), at(6)]
        rows = await settled(a, expected)
        assert {r.replica_id for r in rows} == {"pod-b"}

        # -- b freezes: its lease expires and a takes the schedule over ----------------------
        await move(both, at(6, 5))

        async def a_took_over() -> bool:
            await beat(a)  # b's clock stands still: no beat, no renewal
            return holds(a)

        await wait_until(a_took_over, what=f"pod-a taking {NAME} over", interval=0.5)
        assert clock_of(a).now() < at(8)  # the takeover came before the next slot
        await fire(a, [clock_of(a)], [at(8), at(10)])
        expected += [at(8), at(10)]
        rows = await settled(a, expected)
        assert [r.replica_id for r in rows[-2:]] == ["pod-a", "pod-a"]

        # -- b thaws: its stale lease fires nothing; it rejoins and takes the schedule back --
        await move([clock_of(b)], clock_of(a).now())

        async def b_took_back() -> bool:
            await beat(a, b)
            return holds(b) and not holds(a)

        await wait_until(b_took_back, what=f"pod-b owning {NAME} again", interval=0.1)
        assert clock_of(a).now() < at(12)

        # -- a delete on a reaches b: nothing fires after it anywhere ------------------------
        await a.delete_schedule(NAME)

        async def b_deleted() -> bool:
            await beat(a, b)
            return b.get(NAME) is None and b.running_engine().next_firing(NAME) is None

        await wait_until(b_deleted, what="pod-b disarming the delete", interval=0.1)
        deleted_by = clock_of(a).now()
        await move(both, at(16))
        await beat(a, b)
        rows = await settled(a, expected)
    assert [(r.scheduled_at, r.status) for r in rows] == [
        (s, RunStatus.SUCCEEDED) for s in expected
    ]
    assert sorted(seen) == expected  # each handler once
    assert deleted_by < at(12)
    store = create_store(server_url)
    try:
        report = await audit_ledger(store, [], T0 - timedelta(hours=1), at(16), now=at(16))
    finally:
        await store.dispose()
    assert report.clean, report.text()
    assert report.gap_checked == (NAME,)
