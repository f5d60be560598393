"""Definition versions (SPEC §7; issue 29 item 1): a schedule's life across deploys that edit it.

Daily ``15 1 * * *`` ran at 01:15; the app is redeployed at 10:00 with ``15 2 * * *``. The
02:15 of that day is a slot of the new cadence from before the new version took effect: it is
not owed — not run again (``latest``/``all``), not recorded ``missed`` (``skip``). The next
day's 02:15 is owed like any slot, and downtime across it is caught up by the policy. On every
store, in-process on the injected clock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import anyio
import pytest
from support.running import runs_of, served
from support.waiting import wait_until

from fastapi_voltro_schedules import (
    RunStatus,
    Schedule,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    Trigger,
    TriggerMode,
    define_schedule,
)
from fastapi_voltro_schedules.audit import audit_ledger
from fastapi_voltro_schedules.definitions import Versions, record_versions
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.store import RunRecord, create_store
from fastapi_voltro_schedules.testing import ManualClock

DAY = datetime(2026, 6, 1, tzinfo=UTC)
NAME = "nightly"
INSPECT = {"Authorization": "Bearer inspect-secret-for-tests"}


def t(hour: int, minute: int = 0, day: int = 0) -> datetime:
    return DAY + timedelta(days=day, hours=hour, minutes=minute)


def nightly(cron: str, backfill: str, calls: list[datetime]) -> Schedule:
    async def handler(ctx: ScheduleContext) -> None:
        calls.append(ctx.scheduled_at)

    return define_schedule(name=NAME, cron=cron, timezone="UTC", backfill=backfill, handler=handler)


@asynccontextmanager
async def booted(url: str, schedule: Schedule, clock: ManualClock) -> AsyncIterator[Scheduling]:
    await upgrade_to_head(url)  # a server database is migrated by the release, not the boot
    config = SchedulingConfig(
        database_url=url, replica_id="pod-1", inspect_token="inspect-secret-for-tests"
    )
    async with Scheduling([schedule], config=config, clock=clock).run() as scheduling:
        yield scheduling


async def settled(scheduling: Scheduling, count: int) -> list[RunRecord]:
    """The schedule's rows once there are ``count`` and none is live."""

    async def ready() -> list[RunRecord] | None:
        rows = await runs_of(scheduling, NAME)
        done = len(rows) == count and all(r.status.terminal for r in rows)
        return rows if done else None

    rows: list[RunRecord] = await wait_until(ready, what=f"{count} settled rows of {NAME}")
    return rows


async def fire_at(scheduling: Scheduling, clock: ManualClock, slot: datetime, count: int) -> None:
    """Move the clock to ``slot`` (elapsed time too: ``set`` alone is a wall step, which the
    timer does not take at once) and wait for its row (the ``count``-th) to settle."""
    await clock.advance((slot - clock.now()).total_seconds())
    rows = await settled(scheduling, count)
    assert (rows[-1].scheduled_at, rows[-1].status) == (slot, RunStatus.SUCCEEDED)


async def audit_clean(url: str, schedule: Schedule, now: datetime) -> None:
    store = create_store(url)
    try:
        report = await audit_ledger(store, [schedule], t(0) - timedelta(days=1), now, now=now)
    finally:
        await store.dispose()
    assert report.clean, report.text()
    assert report.gap_checked == (NAME,)


@pytest.mark.parametrize("policy", ["latest", "skip", "all"])
async def test_a_cron_edited_between_deploys_owes_no_slot_of_its_new_cadence_before_the_edit(
    database_url: str, policy: str
) -> None:
    calls: list[datetime] = []
    first = nightly("15 1 * * *", policy, calls)
    clock = ManualClock(t(0))
    async with booted(database_url, first, clock) as scheduling:
        await fire_at(scheduling, clock, t(1, 15), 1)

    edited = nightly("15 2 * * *", policy, calls)
    clock = ManualClock(t(10))
    async with booted(database_url, edited, clock) as scheduling:
        # Catch-up has run before run() yielded: nothing for 02:15 today, run or missed.
        rows = await settled(scheduling, 1)
        assert [(r.scheduled_at, r.status) for r in rows] == [(t(1, 15), RunStatus.SUCCEEDED)]
        assert calls == [t(1, 15)]
        versions = scheduling.versions.of(NAME)
        assert [(v.version, v.cron, v.effective_from) for v in versions] == [
            (2, "15 2 * * *", t(10)),
            (1, "15 1 * * *", t(0)),
        ]
        # the new cadence is owed from the next day on
        await fire_at(scheduling, clock, t(2, 15, day=1), 2)
    assert calls == [t(1, 15), t(2, 15, day=1)]
    await audit_clean(database_url, edited, t(3, day=1))


@pytest.mark.parametrize(
    ("policy", "status"),
    [("latest", RunStatus.SUCCEEDED), ("skip", RunStatus.MISSED), ("all", RunStatus.SUCCEEDED)],
)
async def test_the_old_cadences_slot_just_before_the_edit_is_owed_within_the_boot_grace(
    database_url: str, policy: str, status: RunStatus
) -> None:
    """Found by the life-cycle chaos test: a deploy booting one second after a slot of the old
    cron (inside the 2 s boot grace, which leaves recent slots to the live timer) left that
    slot without a row — the live timer follows the new cron and never fires it."""
    calls: list[datetime] = []
    clock = ManualClock(t(0))
    async with booted(database_url, nightly("15 1 * * *", policy, calls), clock) as scheduling:
        await fire_at(scheduling, clock, t(1, 15), 1)
    edited = nightly("15 2 * * *", policy, calls)
    boot = t(1, 15, day=1) + timedelta(seconds=1)  # 01:15 of day 1 passed a second ago
    async with booted(database_url, edited, ManualClock(boot)) as scheduling:
        rows = await settled(scheduling, 2)
    assert [(r.scheduled_at, r.status) for r in rows[1:]] == [(t(1, 15, day=1), status)]
    await audit_clean(database_url, edited, boot)


@pytest.mark.parametrize(
    ("policy", "status"),
    [("latest", RunStatus.SUCCEEDED), ("skip", RunStatus.MISSED), ("all", RunStatus.SUCCEEDED)],
)
async def test_downtime_after_the_edit_is_still_caught_up_by_policy(
    database_url: str, policy: str, status: RunStatus
) -> None:
    calls: list[datetime] = []
    clock = ManualClock(t(0))
    async with booted(database_url, nightly("15 1 * * *", policy, calls), clock) as scheduling:
        await fire_at(scheduling, clock, t(1, 15), 1)
    edited = nightly("15 2 * * *", policy, calls)
    async with booted(database_url, edited, ManualClock(t(10))):
        pass
    # down from day 0 10:00 until day 2 05:00: day 1 and day 2 at 02:15 passed unattended
    async with booted(database_url, edited, ManualClock(t(5, day=2))) as scheduling:
        rows = await settled(scheduling, 3)
    owed = [(r.scheduled_at, r.status) for r in rows[1:]]
    if policy == "latest":
        assert owed == [(t(2, 15, day=1), RunStatus.MISSED), (t(2, 15, day=2), status)]
    else:
        assert owed == [(t(2, 15, day=1), status), (t(2, 15, day=2), status)]
    assert len(scheduling.versions.of(NAME)) == 2  # the third boot changed nothing
    await audit_clean(database_url, edited, t(5, day=2))


async def test_a_policy_change_keeps_the_cadence_and_its_owed_slots(sqlite_url: str) -> None:
    # Only the backfill policy changed: 01:15 of day 1 was owed by both versions alike, so
    # the new policy catches it up.
    calls: list[datetime] = []
    clock = ManualClock(t(0))
    async with booted(sqlite_url, nightly("15 1 * * *", "skip", calls), clock) as scheduling:
        await fire_at(scheduling, clock, t(1, 15), 1)
    edited = nightly("15 1 * * *", "latest", calls)
    async with booted(sqlite_url, edited, ManualClock(t(3, day=1))) as scheduling:
        rows = await settled(scheduling, 2)
        assert [v.backfill for v in scheduling.versions.of(NAME)] == ["latest", "skip"]
    assert (rows[1].scheduled_at, rows[1].status) == (t(1, 15, day=1), RunStatus.SUCCEEDED)
    await audit_clean(sqlite_url, edited, t(3, day=1))


async def test_a_ledger_from_before_versions_keeps_its_catch_up(sqlite_url: str) -> None:
    # Runs recorded, no version yet (a ledger written before migration 0006): the first
    # version is dated back to the last run, so the deploy's downtime is still caught up.
    await upgrade_to_head(sqlite_url)
    store = create_store(sqlite_url)
    try:
        await store.insert_runs(
            [
                RunRecord(
                    id="sr_legacy",
                    name=NAME,
                    scheduled_at=t(1, 15),
                    status=RunStatus.SUCCEEDED,
                    trigger=Trigger.SELF,
                    fired_at=t(1, 15),
                    finished_at=t(1, 15),
                    replica_id="old",
                )
            ]
        )
    finally:
        await store.dispose()
    calls: list[datetime] = []
    schedule = nightly("15 1 * * *", "latest", calls)
    async with booted(sqlite_url, schedule, ManualClock(t(3, day=1))) as scheduling:
        await settled(scheduling, 2)
        assert [v.effective_from for v in scheduling.versions.of(NAME)] == [t(1, 15)]
    assert calls == [t(1, 15, day=1)]


async def test_replicas_booting_together_record_one_version(database_url: str) -> None:
    await upgrade_to_head(database_url)
    schedule = nightly("15 2 * * *", "skip", [])
    stores = [create_store(database_url) for _ in range(4)]
    seen: list[Versions] = []
    try:

        async def boot(i: int) -> None:
            trigger = lambda s: TriggerMode.SELF  # noqa: E731
            at = t(10) + timedelta(milliseconds=i)
            seen.append(await record_versions(stores[i], [schedule], trigger, at, f"pod-{i}"))

        async with anyio.create_task_group() as tg:
            for i in range(len(stores)):
                tg.start_soon(boot, i)
        stored = await stores[0].definitions([NAME])
    finally:
        for store in stores:
            await store.dispose()
    assert [v.version for v in stored[NAME]] == [1]
    # every replica goes on from the one stored row: the same effective_from
    assert {versions.of(NAME)[0] for versions in seen} == {stored[NAME][0]}


async def test_the_inspect_route_shows_the_versions_newest_first(sqlite_url: str) -> None:
    calls: list[datetime] = []
    async with booted(sqlite_url, nightly("15 1 * * *", "skip", calls), ManualClock(t(0))):
        pass
    config = SchedulingConfig(
        database_url=sqlite_url, replica_id="pod-1", inspect_token="inspect-secret-for-tests"
    )
    scheduling = Scheduling(
        [nightly("15 2 * * *", "skip", calls)], config=config, clock=ManualClock(t(10))
    )
    async with served(scheduling) as client:
        r = await client.get(f"/_voltro/inspect/schedules/{NAME}", headers=INSPECT)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["name"] == NAME and body["cron"] == "15 2 * * *"
        assert body["source"] == "code"
        assert [
            (v["version"], v["cron"], v["timezone"], v["effectiveFrom"], v["source"])
            for v in body["versions"]
        ] == [
            (2, "15 2 * * *", "UTC", "2026-06-01T10:00:00.000Z", "code"),
            (1, "15 1 * * *", "UTC", "2026-06-01T00:00:00.000Z", "code"),
        ]
        assert body["versions"][0]["handler"].endswith("nightly.<locals>.handler")
        missing = await client.get("/_voltro/inspect/schedules/nope", headers=INSPECT)
        assert missing.status_code == 404
        assert missing.json()["code"] == "schedule_not_found"
        unauthorised = await client.get(f"/_voltro/inspect/schedules/{NAME}")
        assert unauthorised.status_code == 401


async def test_the_whole_table_is_read_in_pages_that_split_no_schedules_versions(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Boot reads every version (run-time schedules too) in pages, each its own bounded
    attempt — one statement for 100,000 outlasted the store's 8 s bound on a busy host. A page
    may end inside one schedule's versions: the next one goes on from that version, newest
    first, never skipping or repeating one."""
    from support.stores import open_store

    from fastapi_voltro_schedules.definitions import definition_record
    from fastapi_voltro_schedules.enums import TriggerMode
    from fastapi_voltro_schedules.store import statements

    monkeypatch.setattr(statements, "DEFINITIONS_PAGE", 3)
    async with open_store(database_url) as store:
        records = [
            definition_record(
                define_schedule(
                    name=name, cron=f"{v} 9 * * *", timezone="UTC", handler=lambda ctx: None
                ),
                TriggerMode.SELF,
                effective_from=t(v),
                version=v,
                recorded_by="pod-1",
            )
            for name, versions in (("a", 2), ("b", 3), ("c", 1), ("d", 1))
            for v in range(1, versions + 1)
        ]
        assert await store.add_definitions(records) == 7
        every = await store.definitions()
        named = await store.definitions(["a", "b", "c", "d"])
    assert {name: [r.version for r in rs] for name, rs in every.items()} == {
        "a": [2, 1],
        "b": [3, 2, 1],
        "c": [1],
        "d": [1],
    }
    assert every == named
