"""Pause / resume: nothing fires or is recorded while paused, resume starts at the next
occurrence (no catch-up, at runtime or at the next boot), persisted across restarts, external
arrivals answered ``paused``, Run now and backfill refused."""

from __future__ import annotations

from datetime import datetime
from functools import partial
from typing import Any

import anyio
import httpx
import pytest
from support.pausing import AUTH, BASE, READ, TRIGGER_AUTH, at, pause_scheduling
from support.running import runs_of, served
from support.waiting import wait_until

from fastapi_voltro_schedules import Scheduling
from fastapi_voltro_schedules.errors import StoreUnavailableError
from fastapi_voltro_schedules.external_missed import ExternalMissedWatcher
from fastapi_voltro_schedules.pauses import ALL_SCHEDULES
from fastapi_voltro_schedules.testing import ManualClock


async def slots_of(scheduling: Scheduling, name: str) -> list[datetime]:
    return [r.scheduled_at for r in await runs_of(scheduling, name)]


async def move(clock: ManualClock, to: datetime) -> None:
    """Move the clock forward to ``to`` — wall and elapsed time: ``set`` alone is a wall step,
    which the timer does not take at once — and let the woken loops run (what they write is
    waited for apart)."""
    await clock.advance((to - clock.now()).total_seconds())


async def passed(scheduling: Scheduling, to: datetime, *names: str) -> None:
    """Wait until the timer's pass at ``to`` is over for ``names``: their next firing has
    moved past it. A paused slot is dropped inside that pass (``Timer.dispatch_due``): from
    here on, nothing will fire it."""
    engine = scheduling.running_engine()

    def moved_on() -> bool:
        return all((due := engine.next_firing(n)) is not None and due > to for n in names)

    await wait_until(moved_on, what=f"the timer's pass at {to.isoformat()} for {names}")


async def _has(scheduling: Scheduling, name: str, slot: datetime) -> bool:
    return slot in await slots_of(scheduling, name)


async def wait_slots(scheduling: Scheduling, name: str, expected: list[datetime]) -> None:
    async def there() -> bool:
        return await slots_of(scheduling, name) == expected

    await wait_until(there, what=f"{name}'s slots {expected}")


async def test_pause_stops_firing_and_resume_starts_at_the_next_occurrence(
    sqlite_url: str,
) -> None:
    clock = ManualClock(at(0, 30))
    s = pause_scheduling(sqlite_url, clock)
    async with served(s) as client:
        await move(clock, at(1))
        await wait_slots(s, "minutely", [at(1)])

        r = await client.post(f"{BASE}/minutely/pause", headers=AUTH, json={"reason": "INC-42"})
        assert r.status_code == 200, r.text
        assert r.json() == {
            "name": "minutely",
            "paused": True,
            "changed": True,
            "pause": {"pausedAt": "2026-06-01T12:01:00.000Z", "pausedBy": "operator",
                      "reason": "INC-42", "everySchedule": False, "until": None},
            "resumedAt": None,
        }  # fmt: skip
        again = await client.post(f"{BASE}/minutely/pause", headers=AUTH)
        assert again.json()["changed"] is False and again.json()["pause"]["reason"] == "INC-42"

        listing = (await client.get(BASE, headers={"Authorization": f"Bearer {READ}"})).json()
        entry = {x["name"]: x for x in listing["schedules"]}["minutely"]
        assert entry["paused"] is True and entry["nextFiring"] is None
        assert entry["pause"] == {"pausedAt": "2026-06-01T12:01:00.000Z",
                                  "pausedBy": "operator", "reason": "INC-42",
                                  "everySchedule": False, "until": None}  # fmt: skip

        for minute in (2, 3, 4, 5):
            await move(clock, at(minute))
            await passed(s, at(minute), "minutely")
            # "latest" fires at the same instant: the herd's rows are written together, so
            # once its row is there, one of "minutely" would be too.
            await wait_until(
                lambda m=minute: _has(s, "latest", at(m)), what=f"latest's row at {minute}"
            )
        assert await slots_of(s, "minutely") == [at(1)]  # no run, no skipped, no missed row

        fire = await client.post(f"{BASE}/minutely/fire", headers=AUTH)
        assert fire.status_code == 409 and fire.json()["code"] == "paused"
        assert "voltro schedule resume minutely" in fire.json()["detail"]
        backfill = await client.post(
            f"{BASE}/minutely/backfill",
            headers=AUTH,
            json={"from": "2026-06-01T11:00:00Z", "to": "2026-06-01T11:03:00Z"},
        )
        assert backfill.status_code == 409 and backfill.json()["code"] == "paused"
        assert await slots_of(s, "minutely") == [at(1)]

        await move(clock, at(5, 30))
        r = await client.post(f"{BASE}/minutely/resume", headers=AUTH)
        assert r.status_code == 200 and r.json()["changed"] is True
        assert r.json()["resumedAt"] == "2026-06-01T12:05:30.000Z" and r.json()["pause"] is None
        await move(clock, at(6))
        await wait_slots(s, "minutely", [at(1), at(6)])  # the next occurrence, no catch-up
        listing = (await client.get(BASE, headers=AUTH)).json()
        entry = {x["name"]: x for x in listing["schedules"]}["minutely"]
        assert entry["paused"] is False and entry["pause"] is None
        assert entry["nextFiring"] == "2026-06-01T12:07:00.000Z"


class _SlowWrites:
    """The real store, with each pause/resume write held until the test lets it go — or
    failed, like a database that went away mid-write: what a busy database's tens of
    milliseconds look like, made as long as the test needs."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.release = anyio.Event()
        self.fail = False

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._store, attr)

    async def _held(self, write: str, *args: Any, **kwargs: Any) -> Any:
        await self.release.wait()
        if self.fail:
            raise StoreUnavailableError(f"{write}: the database went away (test)")
        return await getattr(self._store, write)(*args, **kwargs)

    async def pause(self, *args: Any, **kwargs: Any) -> Any:
        return await self._held("pause", *args, **kwargs)

    async def resume(self, *args: Any, **kwargs: Any) -> Any:
        return await self._held("resume", *args, **kwargs)

    async def pause_all(self, *args: Any, **kwargs: Any) -> Any:
        return await self._held("pause_all", *args, **kwargs)

    async def resume_all(self, *args: Any, **kwargs: Any) -> Any:
        return await self._held("resume_all", *args, **kwargs)


async def test_a_slot_due_while_the_pause_or_resume_is_being_written_follows_it(
    sqlite_url: str,
) -> None:
    """The pause holds from the instant it is stamped with, not from when its write returns:
    a slot falling due while the write is in flight is not fired (the ledger would hold a run
    inside the recorded span — CI caught one on a loaded machine); after a resume, one is
    fired, not dropped (a hole the audit would report). A failed write changes nothing."""
    clock = ManualClock(at(0, 59))
    s = pause_scheduling(sqlite_url, clock)
    async with served(s) as client, anyio.create_task_group() as tg:
        pauses = s.pauses
        assert pauses is not None
        slow = _SlowWrites(pauses.store)
        pauses.store = slow
        answers: dict[str, httpx.Response] = {}

        async def post(action: str) -> None:
            answers[action] = await client.post(f"{BASE}/minutely/{action}", headers=AUTH)

        tg.start_soon(post, "pause")
        await wait_until(lambda: pauses.is_paused("minutely"), what="the pause, held at once")
        await pauses.refresh()  # a re-read of the table, which has no row yet, keeps it
        assert pauses.is_paused("minutely")
        await move(clock, at(1))
        await passed(s, at(1), "minutely")
        await wait_until(lambda: _has(s, "latest", at(1)), what="latest's row at 1")
        slow.release.set()
        await wait_until(lambda: "pause" in answers, what="the pause's answer")
        assert answers["pause"].status_code == 200, answers["pause"].text
        assert answers["pause"].json()["pause"]["pausedAt"] == "2026-06-01T12:00:59.000Z"
        assert await slots_of(s, "minutely") == []  # 12:01 fell inside the span: not fired

        slow.release = anyio.Event()
        await move(clock, at(1, 59))
        tg.start_soon(post, "resume")
        await wait_until(lambda: not pauses.is_paused("minutely"), what="the resume, at once")
        await move(clock, at(2))
        await wait_slots(s, "minutely", [at(2)])  # after the span: fired, not dropped
        slow.release.set()
        await wait_until(lambda: "resume" in answers, what="the resume's answer")
        assert answers["resume"].json()["resumedAt"] == "2026-06-01T12:01:59.000Z"

        # a write that fails leaves the copy as it was: not paused, and 12:03 fires
        slow.release, slow.fail = anyio.Event(), True
        answers.clear()
        tg.start_soon(post, "pause")
        await wait_until(lambda: pauses.is_paused("minutely"), what="the second pause, held")
        slow.release.set()
        await wait_until(lambda: "pause" in answers, what="the failed pause's answer")
        assert answers["pause"].status_code == 503, answers["pause"].text
        assert not pauses.is_paused("minutely")
        await move(clock, at(3))
        await wait_slots(s, "minutely", [at(2), at(3)])
        listing = (await client.get(BASE, headers=AUTH)).json()
        entry = {x["name"]: x for x in listing["schedules"]}["minutely"]
        assert entry["paused"] is False


async def test_every_schedule_paused_and_resumed_holds_from_its_stamp_too(sqlite_url: str) -> None:
    """The same for the fleet-wide pause: held while its write is in flight, with its
    ``until``; its resume, likewise."""
    clock = ManualClock(at(0, 59))
    s = pause_scheduling(sqlite_url, clock)
    async with served(s), anyio.create_task_group() as tg:
        pauses = s.pauses
        assert pauses is not None
        slow = _SlowWrites(pauses.store)
        pauses.store = slow
        tg.start_soon(partial(pauses.pause_all, by="operator", reason=None, until=at(5)))
        await wait_until(lambda: pauses.is_paused("latest"), what="the window, held at once")
        fleet = pauses.fleet()
        assert fleet is not None and fleet.until == at(5) and fleet.paused_at == at(0, 59)
        await move(clock, at(1))
        await passed(s, at(1), "minutely", "latest")
        slow.release.set()
        await wait_until(lambda: pauses.own(ALL_SCHEDULES) != fleet, what="the stored window")
        assert pauses.fleet() == fleet  # the row as stored is the one held
        slow.release = anyio.Event()
        await move(clock, at(1, 30))
        tg.start_soon(partial(pauses.resume_all, by="operator"))
        await wait_until(lambda: not pauses.is_paused("latest"), what="the resume, at once")
        await move(clock, at(2))
        await wait_slots(s, "latest", [at(2)])
        slow.release.set()
        await wait_until(lambda: pauses.own(ALL_SCHEDULES).resumed_by == "operator")
        assert await slots_of(s, "minutely") == [at(2)]


async def test_pause_persists_across_restarts_and_the_boot_backfill_skips_the_paused_span(
    sqlite_url: str,
) -> None:
    clock = ManualClock(at(0, 30))
    first = pause_scheduling(sqlite_url, clock)
    async with served(first) as client:
        await move(clock, at(1))
        await wait_slots(first, "minutely", [at(1)])
        await wait_slots(first, "latest", [at(1)])
        await move(clock, at(1, 30))
        for name in ("minutely", "latest"):
            assert (await client.post(f"{BASE}/{name}/pause", headers=AUTH)).status_code == 200

    # Down from 12:01:30 to 12:10:30, paused all along: backfill="all" must not replay a thing.
    clock.set(at(10, 30))
    second = pause_scheduling(sqlite_url, clock)
    async with served(second) as client:
        listing = (await client.get(BASE, headers=AUTH)).json()
        assert {x["name"]: x for x in listing["schedules"]}["minutely"]["paused"] is True
        await move(clock, at(11))
        # Armed, so the boot backfill is over (its missed rows are written before the timer
        # arms); past 12:11, so the live timer has dropped that slot.
        await passed(second, at(11), "minutely", "latest")
        assert await slots_of(second, "minutely") == [at(1)]
        assert await slots_of(second, "latest") == [at(1)]  # not even `missed` rows
        await move(clock, at(11, 30))
        for name in ("minutely", "latest"):
            assert (await client.post(f"{BASE}/{name}/resume", headers=AUTH)).status_code == 200

    # Down again from 12:11:30 to 12:14:30, *not* paused: that span is downtime and is caught
    # up (backfill="all"); the paused span before the resume stays empty.
    clock.set(at(14, 30))
    third = pause_scheduling(sqlite_url, clock)
    async with served(third):
        await wait_slots(third, "minutely", [at(1), at(12), at(13), at(14)])
        await wait_slots(third, "latest", [at(1), at(12), at(13), at(14)])
        by_slot = {r.scheduled_at: r.status.value for r in await runs_of(third, "latest")}
        assert [by_slot[at(m)] for m in (12, 13)] == ["missed", "missed"]


async def test_external_arrivals_while_paused_and_for_the_paused_span(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The missed watcher going back to sleep, by the clock it read after its pass: once it
    # parks at 12:04:10 or later it has recorded all it will for the occurrences closed by
    # then. (A pass's start is no signal: one begun before the clock moved can read the new
    # time, cover the span, and leave no pass to begin after.)
    parked: list[tuple[datetime, float]] = []
    seconds_to_next = ExternalMissedWatcher._seconds_to_next_check

    def counted(watcher: ExternalMissedWatcher, now: datetime) -> float:
        wait = seconds_to_next(watcher, now)
        parked.append((now, wait))
        return wait

    monkeypatch.setattr(ExternalMissedWatcher, "_seconds_to_next_check", counted)
    clock = ManualClock(at(0, 10))
    s = pause_scheduling(sqlite_url, clock)
    async with served(s) as client:
        assert (await client.post(f"{BASE}/ext/pause", headers=AUTH)).status_code == 200
        await move(clock, at(2, 10))
        r = await client.post("/_voltro/schedules/ext/trigger", headers=TRIGGER_AUTH)
        assert r.status_code == 200, r.text
        assert r.json() == {"status": "paused", "runId": None,
                            "scheduledAt": "2026-06-01T12:02:00.000Z"}  # fmt: skip
        await move(clock, at(4, 10))  # the missed watcher passes 12:01..12:03: paused, silent
        await wait_until(
            lambda: any(now >= at(4, 10) and wait > 0 for now, wait in parked),
            what="the watcher parked after its pass over 12:01..12:03",
        )
        assert await runs_of(s, "ext") == []

        await move(clock, at(4, 20))
        assert (await client.post(f"{BASE}/ext/resume", headers=AUTH)).status_code == 200
        # A late redelivery of an occurrence inside the paused span is not run after resume.
        late = await client.post(
            "/_voltro/schedules/ext/trigger",
            headers={**TRIGGER_AUTH, "X-Voltro-Scheduled-At": "2026-06-01T12:04:00Z"},
        )
        assert late.status_code == 200 and late.json()["status"] == "paused"
        await move(clock, at(5, 5))
        r = await client.post("/_voltro/schedules/ext/trigger", headers=TRIGGER_AUTH)
        assert r.status_code == 202 and r.json()["scheduledAt"] == "2026-06-01T12:05:00.000Z"
        await wait_slots(s, "ext", [at(5)])


async def test_pause_of_an_unknown_schedule_is_404_and_a_long_reason_422(
    sqlite_url: str,
) -> None:
    s = pause_scheduling(sqlite_url, ManualClock(at(0, 30)))
    async with served(s) as client:
        r = await client.post(f"{BASE}/nope/pause", headers=AUTH)
        assert r.status_code == 404 and r.json()["code"] == "schedule_not_found"
        r = await client.post(f"{BASE}/minutely/pause", headers=AUTH, json={"reason": "x" * 501})
        assert r.status_code == 422
        r = await client.post(f"{BASE}/minutely/resume", headers=AUTH)
        assert r.status_code == 200 and r.json()["changed"] is False
        assert r.json()["resumedAt"] is None


# ------------------------------------------------------------------------- the store, x3


async def test_store_pause_contract(database_url: str) -> None:
    from fastapi_voltro_schedules.migrations import upgrade_to_head
    from fastapi_voltro_schedules.store import create_store

    await upgrade_to_head(database_url)
    store = create_store(database_url)
    try:
        assert await store.pauses() == []
        assert await store.resume("job", resumed_at=at(0), resumed_by="operator") is None
        first = await store.pause("job", paused_at=at(1), paused_by="operator", reason="why")
        assert first.active and first.paused_at == at(1) and first.reason == "why"
        # idempotent: the first pause keeps its who/when/reason
        second = await store.pause("job", paused_at=at(2), paused_by="operator", reason=None)
        assert second == first
        resumed = await store.resume("job", resumed_at=at(3), resumed_by="operator")
        assert resumed is not None and not resumed.active and resumed.resumed_at == at(3)
        # a second resume changes nothing
        assert await store.resume("job", resumed_at=at(4), resumed_by="operator") == resumed
        again = await store.pause("job", paused_at=at(5), paused_by="operator", reason="r2")
        assert again.active and again.paused_at == at(5) and again.resumed_at is None
        await store.pause("other", paused_at=at(6), paused_by="operator", reason=None)
        assert [p.name for p in await store.pauses()] == ["job", "other"]
    finally:
        await store.dispose()
