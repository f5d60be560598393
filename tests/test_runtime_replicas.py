"""A run-time write reaches every replica within one heartbeat (SPEC §7; issue 31), on the
multi-instance stores: two schedulers share one database (``advisoryLock``) and one manual
clock. A schedule put on one is armed by the other at its next heartbeat and then fired exactly
once per slot across both; an edit and a delete on the other replica reach the first the same
way; the audit finds no gap and no duplicate.
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
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.store import RunRecord, create_store
from fastapi_voltro_schedules.testing import ManualClock

T0 = datetime(2026, 6, 1, 10, 0, 5, tzinfo=UTC)
NAME = "report.acme"
HEARTBEAT_MS = 10_000

pytestmark = pytest.mark.parametrize(
    "server", [pytest.param("postgres", marks=pytest.mark.postgres), "mariadb"]
)


def at(minute: int, second: int = 0) -> datetime:
    return datetime(2026, 6, 1, 10, minute, second, tzinfo=UTC)


seen: list[tuple[str, datetime]] = []


@define_handler(name="tenantReport")
async def tenant_report(ctx: ScheduleContext) -> None:
    seen.append((ctx.name, ctx.scheduled_at))


@asynccontextmanager
async def replicas(url: str, clock: ManualClock) -> AsyncIterator[tuple[Scheduling, Scheduling]]:
    await upgrade_to_head(url)
    async with AsyncExitStack() as stack:
        pair = []
        for replica in ("pod-a", "pod-b"):
            config = SchedulingConfig(
                database_url=url,
                replica_id=replica,
                coordination="advisoryLock",
                schedule_heartbeat_ms=HEARTBEAT_MS,
            )
            scheduling = Scheduling(config=config, clock=clock, handlers=[tenant_report])
            pair.append(await stack.enter_async_context(scheduling.run()))
        yield pair[0], pair[1]


async def to(clock: ManualClock, instant: datetime) -> None:
    await clock.advance((instant - clock.now()).total_seconds())


async def settled(scheduling: Scheduling, count: int) -> list[RunRecord]:
    async def ready() -> list[RunRecord] | None:
        rows = await runs_of(scheduling, NAME)
        return rows if len(rows) == count and all(r.status.terminal for r in rows) else None

    rows: list[RunRecord] = await wait_until(ready, what=f"{count} settled rows")
    return rows


async def beat(clock: ManualClock, scheduling: Scheduling, armed: bool) -> None:
    """One heartbeat on the shared clock, then wait until ``scheduling`` has read it."""
    await clock.advance(HEARTBEAT_MS / 1000)
    await wait_until(
        lambda: (scheduling.get(NAME) is not None) is armed,
        what=f"{NAME} {'armed' if armed else 'disarmed'} on {scheduling.config.replica_id}",
    )


@pytest.fixture
def server_url(request: pytest.FixtureRequest, server: str) -> str:
    return str(request.getfixturevalue(f"{server}_url"))


async def test_a_write_on_one_replica_fires_once_per_slot_across_both(server_url: str) -> None:
    seen.clear()
    clock = ManualClock(T0)
    async with replicas(server_url, clock) as (a, b):
        await a.put_schedule(NAME, cron="* * * * *", timezone="UTC", handler="tenantReport")
        assert a.get(NAME) is not None and b.get(NAME) is None  # b reads it at its next beat
        await beat(clock, b, armed=True)
        assert b.engine is not None and b.engine.next_firing(NAME) == at(1)
        for count, minute in enumerate((1, 2, 3), start=1):
            await to(clock, at(minute))
            await settled(a, count)
        # an edit on b reaches a: every other minute from 10:03:30 on
        await clock.advance(30)
        await b.put_schedule(NAME, cron="*/2 * * * *", timezone="UTC", handler="tenantReport")
        await clock.advance(HEARTBEAT_MS / 1000)
        await wait_until(lambda: a.get(NAME) is not None and a.get(NAME).cron == "*/2 * * * *")
        for count, minute in enumerate((4, 6), start=4):
            await to(clock, at(minute))
            await settled(a, count)
        # a delete on b stops both
        await clock.advance(10)
        await b.delete_schedule(NAME)
        await beat(clock, a, armed=False)
        for minute in (7, 8, 9, 10):
            await to(clock, at(minute))
        await clock.advance(1)
        rows = await runs_of(a, NAME)
    assert [(r.scheduled_at, r.status) for r in rows] == [
        (at(m), RunStatus.SUCCEEDED) for m in (1, 2, 3, 4, 6)
    ]
    assert sorted(slot for _, slot in seen) == [at(m) for m in (1, 2, 3, 4, 6)]  # once each
    store = create_store(server_url)
    try:
        report = await audit_ledger(store, [], T0 - timedelta(hours=1), at(12), now=at(12))
    finally:
        await store.dispose()
    assert report.clean, report.text()
    assert report.gap_checked == (NAME,)
