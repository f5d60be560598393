"""A claim older than three beats whose slot has no row becomes an accounted slot (issue 29
item 9, the sweeper).

A replica stopped between claiming a slot and recording it (the paths that still write them
apart: a queue's fenced claim under ``cluster``, a missed slot's claim, a hole's repair — or a
version of the package from before claims and rows were written together) leaves the slot
claimed with no row: every other replica loses its claim to it, nothing runs it, nothing says
so — the audit reports a gap, and a retried external arrival is a duplicate of nothing for
ever. The claims sweep (every three heartbeats, with the reaper) writes it ``missed`` with
``error_tag="claim-without-row"``, taking the claim over in the row's own transaction so
replicas sweeping together write it once.

Here the stopped replica is a claim seeded in the claims table, as it leaves it; the replicas
that live on run in-process on the injected clock, two of them on Postgres and MariaDB
(``advisoryLock``), one on a SQLite file for an external schedule.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from conftest import SERVERS
from support.running import runs_of
from support.waiting import wait_until

from fastapi_voltro_schedules import (
    CoordinationOutcome,
    RunStatus,
    Schedule,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    Trigger,
    define_schedule,
)
from fastapi_voltro_schedules.api.trigger import arrive
from fastapi_voltro_schedules.audit import audit_ledger
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.models import claim_key
from fastapi_voltro_schedules.store import RunRecord, create_store
from fastapi_voltro_schedules.testing import ManualClock

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
NAME = "every5s"
HEARTBEAT_MS = 1000
LOST = 10
"""The slot the stopped replica claimed and never recorded (seconds after ``T0``)."""


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


async def seed_claim(url: str, name: str, slot: datetime, claimed_at: datetime) -> None:
    """The claims row a replica killed between its claim and its row leaves behind."""
    await upgrade_to_head(url)
    store = create_store(url)
    try:
        assert await store.claim(claim_key(name, slot), "pod-dead", claimed_at)
    finally:
        await store.dispose()


def every5s(calls: list[tuple[str, datetime]], replica: str) -> Schedule:
    return define_schedule(
        name=NAME, cron="*/5 * * * * *", timezone="UTC", handler=recorder(calls, replica)
    )


def recorder(calls: list[tuple[str, datetime]], replica: str) -> Any:
    async def handler(ctx: ScheduleContext) -> None:
        calls.append((replica, ctx.scheduled_at))

    return handler


def slot_row(rows: list[RunRecord], slot: datetime) -> list[RunRecord]:
    return [r for r in rows if r.scheduled_at == slot]


@pytest.mark.parametrize("server", SERVERS)
async def test_two_replicas_record_a_slot_claimed_and_never_recorded_once(
    server: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue(f"{server}_url")
    await seed_claim(url, NAME, at(LOST), at(LOST + 0.003))
    clock = ManualClock(at(1))
    calls: list[tuple[str, datetime]] = []
    async with AsyncExitStack() as stack:
        replicas: list[Scheduling] = []
        for replica in ("pod-1", "pod-2"):
            config = SchedulingConfig(
                database_url=url,
                replica_id=replica,
                coordination="advisoryLock",
                schedule_heartbeat_ms=HEARTBEAT_MS,
            )
            scheduling = Scheduling([every5s(calls, replica)], config=config, clock=clock)
            replicas.append(await stack.enter_async_context(scheduling.run()))
        first = replicas[0]
        for second in range(5, 26, 5):
            await clock.advance((at(second) - clock.now()).total_seconds())
            if second == LOST:
                continue  # both replicas lose the claim to the stopped one: nothing to wait for

            due = at(second)

            async def settled(slot: datetime = due) -> bool:
                rows = slot_row(await runs_of(first, NAME), slot)
                return len(rows) == 1 and rows[0].status.terminal

            await wait_until(settled, what=f"{NAME}@{at(second):%H:%M:%S} settled")

        async def accounted() -> list[RunRecord] | None:
            return slot_row(await runs_of(first, NAME), at(LOST)) or None

        # the sweep at the first corpse-loop turn past LOST + 3 beats
        lost = await wait_until(accounted, what=f"a row for the claimed slot {NAME}@{LOST}s")
        await clock.advance(3 * HEARTBEAT_MS / 1000)  # another sweep of both replicas
        rows = await runs_of(first, NAME)
        assert first.store is not None
        report = await audit_ledger(
            first.store, [every5s([], "audit")], at(0), at(25),
            heartbeat_ms=HEARTBEAT_MS, now=at(60),
        )  # fmt: skip
    assert [(r.status, r.error_tag, r.trigger, r.coordination_outcome) for r in lost] == [
        (RunStatus.MISSED, "claim-without-row", Trigger.SELF, CoordinationOutcome.WON_LOCK)
    ]
    assert lost[0].replica_id in ("pod-1", "pod-2")
    assert "pod-dead" in (lost[0].error_message or "")
    assert len(slot_row(rows, at(LOST))) == 1  # one row, though both replicas swept it
    assert sorted(s for _, s in calls) == [at(5), at(15), at(20), at(25)]  # never ran
    assert report.clean, report.text()


async def test_an_external_slot_claimed_by_a_worker_that_stopped_is_recorded_missed(
    sqlite_url: str,
) -> None:
    # One SQLite file, several workers: the one that claimed the arrival died before its row;
    # the CronJob's retry reaches a worker that lives on and is a duplicate of nothing.
    slot = at(60)  # an every-minute external schedule's occurrence
    await seed_claim(sqlite_url, "hook", slot, slot + timedelta(seconds=0.2))
    clock = ManualClock(slot + timedelta(seconds=1))
    calls: list[tuple[str, datetime]] = []
    config = SchedulingConfig(
        database_url=sqlite_url, replica_id="worker-2", schedule_heartbeat_ms=HEARTBEAT_MS
    )
    schedule = define_schedule(
        name="hook", cron="* * * * *", timezone="UTC", trigger="external",
        handler=recorder(calls, "worker-2"),
    )  # fmt: skip
    async with Scheduling([schedule], config=config, clock=clock).run() as scheduling:
        retry = await arrive(scheduling, "hook", slot)
        assert (retry.status, retry.run) == ("duplicate", None)  # lost to the dead claim

        async def accounted() -> list[RunRecord] | None:
            return slot_row(await runs_of(scheduling, "hook"), slot) or None

        await clock.advance(4 * HEARTBEAT_MS / 1000)
        lost = await wait_until(accounted, what="a row for the claimed slot hook@12:01")
    assert [(r.status, r.error_tag, r.trigger, r.coordination_outcome) for r in lost] == [
        (RunStatus.MISSED, "claim-without-row", Trigger.EXTERNAL, CoordinationOutcome.EXTERNAL)
    ]
    assert calls == []
