"""Pausing every schedule at once (a maintenance window), on the manual clock.

One call pauses every schedule — a run-time one written during the window too — with who,
why and an optional ``until``; the listing carries it (``pauseAll``) and each schedule shows
it; after ``until`` every replica fires again by itself, and nothing inside the window is
replayed (``backfill="all"`` neither). A schedule paused on its own stays paused. On three
Postgres replicas sharing one database and one manual clock, the pause holds on each within
a pause refresh and the slot after the window fires once. The audit stays clean throughout.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
from support.running import runs_of, served
from support.waiting import wait_until

from fastapi_voltro_schedules import (
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_handler,
    define_schedule,
)
from fastapi_voltro_schedules.audit import audit_ledger
from fastapi_voltro_schedules.enums import TriggerMode
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.pauses import PauseView
from fastapi_voltro_schedules.records import ALL_SCHEDULES, PauseRecord
from fastapi_voltro_schedules.testing import ManualClock

OPERATOR = "operator-token-for-pause-all-tests"
READ = "viewer-token-for-pause-all-tests-x"
AUTH = {"Authorization": f"Bearer {OPERATOR}"}
BASE = "/_voltro/inspect/schedules"
PAUSE_ALL = "/_voltro/inspect/pause-all"
RESUME_ALL = "/_voltro/inspect/resume-all"


def at(minute: int, second: int = 0) -> datetime:
    return datetime(2026, 6, 1, 12, minute, second, tzinfo=UTC)


seen: list[tuple[str, datetime]] = []


async def record(ctx: ScheduleContext) -> None:
    seen.append((ctx.name, ctx.scheduled_at))


@define_handler(name="tenantReport")
async def tenant_report(ctx: ScheduleContext) -> None:
    seen.append((ctx.name, ctx.scheduled_at))


def scheduling(url: str, clock: ManualClock, replica: str = "pod-1") -> Scheduling:
    schedules = [
        define_schedule(
            name="minutely", cron="* * * * *", timezone="UTC", handler=record, backfill="all"
        ),
        define_schedule(name="latest", cron="* * * * *", timezone="UTC", handler=record),
    ]
    config = SchedulingConfig(
        database_url=url,
        replica_id=replica,
        inspect_token=OPERATOR,
        inspect_read_token=READ,
    )
    return Scheduling(schedules, config=config, clock=clock, handlers=[tenant_report])


async def move(clock: ManualClock, to: datetime) -> None:
    await clock.advance((to - clock.now()).total_seconds())


async def passed(s: Scheduling, to: datetime, *names: str) -> None:
    """The timer's pass at ``to`` is over for ``names`` (a held slot is dropped in it)."""
    engine = s.running_engine()

    def moved_on() -> bool:
        return all((due := engine.next_firing(n)) is not None and due > to for n in names)

    await wait_until(moved_on, what=f"the timer's pass at {to.isoformat()} for {names}")


async def slots(s: Scheduling, name: str) -> list[datetime]:
    return [r.scheduled_at for r in await runs_of(s, name)]


async def wait_slots(s: Scheduling, name: str, expected: list[datetime]) -> None:
    async def there() -> bool:
        rows = await runs_of(s, name)
        done = all(r.status.terminal for r in rows)
        return done and [r.scheduled_at for r in rows] == expected

    await wait_until(there, what=f"{name}'s slots {expected}")


async def audit_clean(s: Scheduling, end: datetime, now: datetime) -> None:
    assert s.store is not None
    own = [x for x in s.schedules if s.trigger_of(x) is TriggerMode.SELF and x.source == "code"]
    report = await audit_ledger(
        s.store, own, at(0), end, heartbeat_ms=s.config.schedule_heartbeat_ms, now=now
    )
    assert report.clean, report.text()
    assert "tenant.a" in report.gap_checked  # the run-time one, from its versions


async def test_pause_all_holds_every_schedule_and_resumes_by_itself_at_until(
    sqlite_url: str,
) -> None:
    seen.clear()
    clock = ManualClock(at(0, 30))
    s = scheduling(sqlite_url, clock)
    async with served(s) as client:
        await move(clock, at(1))
        await wait_slots(s, "minutely", [at(1)])
        await wait_slots(s, "latest", [at(1)])
        await move(clock, at(1, 10))
        own = await client.post(f"{BASE}/latest/pause", headers=AUTH, json={"reason": "own"})
        assert own.status_code == 200

        await move(clock, at(1, 30))
        body = {"reason": "db upgrade", "until": "2026-06-01T12:04:00Z"}
        r = await client.post(PAUSE_ALL, headers=AUTH, json=body)
        assert r.status_code == 200, r.text
        assert r.json() == {
            "paused": True,
            "changed": True,
            "pause": {"pausedAt": "2026-06-01T12:01:30.000Z", "pausedBy": "operator",
                      "reason": "db upgrade", "everySchedule": True,
                      "until": "2026-06-01T12:04:00.000Z"},
            "resumedAt": None,
        }  # fmt: skip
        read_only = await client.post(
            PAUSE_ALL, headers={"Authorization": f"Bearer {READ}"}, json=body
        )
        assert read_only.status_code == 403

        # A run-time schedule written during the window is held by it too.
        await move(clock, at(1, 40))
        await s.put_schedule("tenant.a", cron="* * * * *", timezone="UTC", handler="tenantReport")

        listing = (await client.get(BASE, headers=AUTH)).json()
        assert listing["pauseAll"]["until"] == "2026-06-01T12:04:00.000Z"
        entries = {x["name"]: x for x in listing["schedules"]}
        assert {n: (e["paused"], e["nextFiring"]) for n, e in entries.items()} == {
            "minutely": (True, None),
            "latest": (True, None),
            "tenant.a": (True, None),
        }
        assert entries["minutely"]["pause"]["everySchedule"] is True
        assert entries["latest"]["pause"]["everySchedule"] is False  # its own pause shows

        fire = await client.post(f"{BASE}/minutely/fire", headers=AUTH)
        assert fire.status_code == 409 and fire.json()["code"] == "paused"
        assert "resume-all" in fire.json()["detail"]

        # 12:02, 12:03 and 12:04 (the window's last instant) pass: nothing fires, no row.
        for minute in (2, 3, 4):
            await move(clock, at(minute))
            await passed(s, at(minute), "minutely", "latest", "tenant.a")
        assert await slots(s, "minutely") == [at(1)]
        assert await slots(s, "tenant.a") == []

        # After `until`: every schedule fires again by itself — but not the one paused on its
        # own — and the window is not replayed (minutely's backfill is "all").
        await move(clock, at(5))
        await wait_slots(s, "minutely", [at(1), at(5)])
        await wait_slots(s, "tenant.a", [at(5)])
        await passed(s, at(5), "latest")
        assert await slots(s, "latest") == [at(1)]
        listing = (await client.get(BASE, headers=AUTH)).json()
        assert listing["pauseAll"] is None
        assert {x["name"]: x["paused"] for x in listing["schedules"]} == {
            "minutely": False,
            "latest": True,
            "tenant.a": False,
        }
        await move(clock, at(6))
        await wait_slots(s, "minutely", [at(1), at(5), at(6)])
        await wait_slots(s, "tenant.a", [at(5), at(6)])
        await audit_clean(s, at(6), at(9))
    assert sorted(seen) == sorted(
        [("minutely", at(1)), ("latest", at(1)), ("minutely", at(5)), ("tenant.a", at(5)),
         ("minutely", at(6)), ("tenant.a", at(6))]
    )  # fmt: skip


async def test_resume_all_ends_the_window_and_a_restart_does_not_replay_it(
    sqlite_url: str,
) -> None:
    seen.clear()
    clock = ManualClock(at(0, 30))
    first = scheduling(sqlite_url, clock)
    async with served(first) as client:
        await move(clock, at(1))
        await wait_slots(first, "minutely", [at(1)])
        await move(clock, at(1, 30))
        r = await client.post(PAUSE_ALL, headers=AUTH, json={"reason": "window"})
        assert r.json()["pause"]["until"] is None and r.json()["changed"] is True

        # Again, now with an end: the window keeps its start, who and why, and takes the end.
        await move(clock, at(1, 45))
        again = await client.post(PAUSE_ALL, headers=AUTH, json={"until": "2026-06-01T13:00Z"})
        assert again.json()["changed"] is False
        assert again.json()["pause"]["pausedAt"] == "2026-06-01T12:01:30.000Z"
        assert again.json()["pause"]["reason"] == "window"
        assert again.json()["pause"]["until"] == "2026-06-01T13:00:00.000Z"
        past = await client.post(PAUSE_ALL, headers=AUTH, json={"until": "2026-06-01T12:00Z"})
        assert past.status_code == 409 and past.json()["code"] == "until_passed"
        assert "until=" in past.json()["detail"]
        zoneless = await client.post(PAUSE_ALL, headers=AUTH, json={"until": "2026-06-01T13:00"})
        assert zoneless.status_code == 422 and "has no zone" in zoneless.json()["detail"]

        await move(clock, at(2))
        await passed(first, at(2), "minutely", "latest")
    # Down from 12:02 to 12:04:30, the window still open: the boot catches nothing up.
    clock.set(at(4, 30))
    second = scheduling(sqlite_url, clock)
    async with served(second) as client:
        assert (await client.get(BASE, headers=AUTH)).json()["pauseAll"] is not None
        await move(clock, at(5))
        await passed(second, at(5), "minutely", "latest")
        assert await slots(second, "minutely") == [at(1)]
        await move(clock, at(5, 30))
        r = await client.post(RESUME_ALL, headers=AUTH)
        assert r.json() == {
            "paused": False,
            "changed": True,
            "pause": None,
            "resumedAt": "2026-06-01T12:05:30.000Z",
        }
        assert (await client.post(RESUME_ALL, headers=AUTH)).json()["changed"] is False
        await move(clock, at(6))
        await wait_slots(second, "minutely", [at(1), at(6)])
        await wait_slots(second, "latest", [at(1), at(6)])
    # and a boot after the window: owed from the resume on, the window itself never
    clock.set(at(8, 30))
    third = scheduling(sqlite_url, clock)
    async with served(third):
        await wait_slots(third, "minutely", [at(1), at(6), at(7), at(8)])
        assert third.store is not None
        report = await audit_ledger(
            third.store, third.schedules, at(0), at(8), heartbeat_ms=1000, now=at(9)
        )
        assert report.clean, report.text()


# --- three Postgres replicas, one manual clock -----------------------------------------------


@asynccontextmanager
async def replicas(url: str, clock: ManualClock) -> AsyncIterator[list[Scheduling]]:
    await upgrade_to_head(url)
    async with AsyncExitStack() as stack:
        running = []
        for replica in ("pod-a", "pod-b", "pod-c"):
            s = scheduling(url, clock, replica)
            running.append(await stack.enter_async_context(s.run()))
        yield running


class RefreshesAfter:
    """Which replicas re-read the pauses table in a refresh that began after :attr:`written`
    was set (a wrapper around each copy's :meth:`Pauses.refresh`)."""

    def __init__(self, pods: list[Scheduling]) -> None:
        self.written = False
        self.done: set[int] = set()
        for i, pod in enumerate(pods):
            assert pod.pauses is not None
            inner = pod.pauses.refresh

            async def refresh(i: int = i, inner: Any = inner) -> None:
                began_after = self.written
                await inner()
                if began_after:
                    self.done.add(i)

            pod.pauses.refresh = refresh  # type: ignore[method-assign]
        self.count = len(pods)

    def everywhere(self) -> bool:
        return len(self.done) == self.count


@pytest.mark.postgres
async def test_pause_all_holds_on_three_postgres_replicas_and_resumes_on_time(
    postgres_url: str,
) -> None:
    seen.clear()
    clock = ManualClock(at(0, 30))
    async with replicas(postgres_url, clock) as pods:
        a, b, c = pods
        await move(clock, at(1))
        await wait_slots(a, "minutely", [at(1)])

        await move(clock, at(1, 20))
        refreshed = RefreshesAfter(pods)
        await b.pause_all(by="operator", reason="db upgrade", until=at(3, 30))
        refreshed.written = True
        # Each replica's copy says so once it has read the table once since the write (one
        # refresh; not a real-time bound — the box may be busy — but the refresh itself).
        await wait_until(refreshed.everywhere, what="one refresh of every replica's pauses")
        for pod in pods:
            assert pod.pauses is not None and pod.pauses.is_paused("minutely"), pod

        for minute in (2, 3):
            await move(clock, at(minute))
            for pod in pods:
                await passed(pod, at(minute), "minutely", "latest")
        assert await slots(a, "minutely") == [at(1)]
        assert await slots(a, "latest") == [at(1)]

        # 12:03:30 passes: no write, no call — every replica fires 12:04, once.
        await move(clock, at(4))
        await wait_slots(a, "minutely", [at(1), at(4)])
        await wait_slots(a, "latest", [at(1), at(4)])
        for pod in pods:
            assert pod.pauses is not None and not pod.pauses.is_paused("minutely")
        assert sorted(seen) == sorted(
            [("minutely", at(1)), ("latest", at(1)), ("minutely", at(4)), ("latest", at(4))]
        )
        assert c.store is not None
        report = await audit_ledger(c.store, c.schedules, at(0), at(4), now=at(10))
        assert report.clean, report.text()
        assert set(report.gap_checked) == {"minutely", "latest"}


# --- the rules, as a table -------------------------------------------------------------------


class _View(PauseView):
    """A pauses copy of given rows, judged at a given instant."""

    def __init__(self, rows: list[PauseRecord], now: datetime) -> None:
        self.rows = {r.name: r for r in rows}
        self.at = now

    def own(self, name: str) -> PauseRecord | None:
        return self.rows.get(name)

    def now(self) -> datetime:
        return self.at


def _fleet(until: datetime | None = None, resumed: datetime | None = None) -> PauseRecord:
    if until is not None:
        return PauseRecord(ALL_SCHEDULES, at(1), "operator", None, until, "until", until)
    return PauseRecord(ALL_SCHEDULES, at(1), "operator", None, resumed, resumed and "operator")


@pytest.mark.parametrize(
    ("fleet", "now", "paused", "held", "catch_up_from"),
    [
        # open-ended window: everything held, whatever the slot
        (_fleet(), at(2), True, {at(0): True, at(2): True, at(9): True}, at(0)),
        # a window with an end, judged inside it: held like an open one
        (_fleet(until=at(4)), at(3), True, {at(0): True, at(4): True, at(5): True}, at(4)),
        # ... at its last instant still (a slot at `until` is inside)
        (_fleet(until=at(4)), at(4), True, {at(4): True, at(5): True}, at(4)),
        # ... and after it: only its span is held; catch-up starts at its end
        (_fleet(until=at(4)), at(6), False, {at(1): False, at(2): True, at(4): True,
                                             at(5): False}, at(4)),
        # resumed early: its span up to the resume
        (_fleet(resumed=at(3)), at(6), False, {at(3): True, at(4): False}, at(3)),
    ],
)  # fmt: skip
def test_the_fleet_wide_pause_rules(
    fleet: PauseRecord,
    now: datetime,
    paused: bool,
    held: dict[datetime, bool],
    catch_up_from: datetime,
) -> None:
    view = _View([fleet], now)
    assert view.is_paused("any") is paused
    assert (view.fleet() is not None) is paused
    assert {slot: view.holds("any", slot) for slot in held} == held
    assert view.catch_up_from("any", at(0)) == catch_up_from
    # A schedule's own pause is its own: the fleet's end does not lift it.
    own = PauseRecord("mine", at(0, 30), "operator", "own")
    mine = _View([fleet, own], now)
    assert mine.is_paused("mine") and mine.get("mine") == own
