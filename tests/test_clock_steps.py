"""The timer under wall-clock steps (issue 29 item 14).

``ManualClock.set`` steps the wall clock alone (an NTP step, an operator's ``date -s``);
``advance`` moves wall and elapsed (monotonic) time together — a busy loop or a suspended VM
whose elapsed time passed too. A slot is owed once it is due on the timer's clock, which
carries the wall clock forward on the monotonic one (``clock.SteadyClock``): a step is not
taken until it has held for ``SteadyClock.CONFIRM_SECONDS`` (300 s) of elapsed time.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from support.running import running, runs_of
from support.timer_passes import TimerPasses
from support.waiting import wait_until

from fastapi_voltro_schedules import RunStatus, Schedule, ScheduleContext, define_schedule
from fastapi_voltro_schedules.scheduling import Scheduling
from fastapi_voltro_schedules.testing import ManualClock

T0 = datetime(2026, 6, 1, 11, 59, 30, tzinfo=UTC)


def minute(n: int, hour: int = 12) -> datetime:
    return datetime(2026, 6, 1, hour, 0, tzinfo=UTC) + timedelta(minutes=n)


def minutely() -> Schedule:
    @define_schedule(name="minutely", cron="* * * * *", timezone="UTC")
    async def handler(ctx: ScheduleContext) -> None:
        return None

    return handler


async def rows_until(s: Scheduling, slots: list[datetime]) -> list[tuple[datetime, RunStatus]]:
    """Wait until the ledger holds exactly ``slots``' rows, every one terminal."""

    async def settled() -> bool:
        rows = await runs_of(s, "minutely")
        return [r.scheduled_at for r in rows] == slots and all(r.status.terminal for r in rows)

    await wait_until(settled, what=f"rows for {slots}")
    return [(r.scheduled_at, r.status) for r in await runs_of(s, "minutely")]


async def test_a_forward_wall_step_records_no_missed_slot_and_runs_nothing_early(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wall clock jumps an hour ahead at 12:00:20: 12:01 is still 40 s away in elapsed
    time. Before the fix the next wake recorded 12:01 … 12:59 ``missed`` and ran 13:00 —
    none of them due yet."""
    passes = TimerPasses(monkeypatch)
    clock = ManualClock(T0)
    async with running([minutely()], sqlite_url, clock) as s:
        await clock.advance(30)  # 12:00 fires
        await rows_until(s, [minute(0)])
        await clock.advance(20)
        after_step = passes.mark()
        clock.set(minute(0, hour=13) + timedelta(seconds=20))  # NTP steps +1 h
        await clock.advance(0)
        await passes.reach(minute(0) + timedelta(seconds=20), since=after_step)
        assert passes.dispatched(since=after_step) == []  # the wake the step caused: nothing
        assert await rows_until(s, [minute(0)]) == [(minute(0), RunStatus.SUCCEEDED)]
        await clock.advance(39)  # 12:00:59 by elapsed time: not yet
        await passes.reach(minute(0) + timedelta(seconds=59), since=after_step)
        assert passes.dispatched(since=after_step) == []
        await clock.advance(1)  # 12:01 by elapsed time
        await rows_until(s, [minute(0), minute(1)])
        await clock.advance(60)
        rows = await rows_until(s, [minute(0), minute(1), minute(2)])
        assert s.running_engine().next_firing("minutely") == minute(3)
    assert rows == [(slot, RunStatus.SUCCEEDED) for slot in (minute(0), minute(1), minute(2))]


async def test_a_backward_wall_step_leaves_the_next_slot_on_time(sqlite_url: str) -> None:
    """The wall clock jumps an hour back at 12:01:10 after 12:00 and 12:01 ran: 12:02 is due
    50 s later in elapsed time. Before the fix nothing fired until the wall clock was back at
    12:02 — an hour of silence."""
    clock = ManualClock(T0)
    async with running([minutely()], sqlite_url, clock) as s:
        await clock.advance(30)
        # 12:00's run ends before 12:01 comes, as it does a minute later in real time (a run
        # still going at 12:01 makes 12:01 an overlap skip)
        await rows_until(s, [minute(0)])
        await clock.advance(60)
        await rows_until(s, [minute(0), minute(1)])
        await clock.advance(10)
        clock.set(minute(1, hour=11) + timedelta(seconds=10))  # steps back an hour
        await clock.advance(50)  # 12:02 by elapsed time
        await rows_until(s, [minute(0), minute(1), minute(2)])
        await clock.advance(60)
        rows = await rows_until(s, [minute(0), minute(1), minute(2), minute(3)])
    assert rows == [(minute(n), RunStatus.SUCCEEDED) for n in range(4)]


async def test_a_forward_step_that_holds_is_followed_and_the_slots_passed_over_are_behind(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Once the step has held for ``SteadyClock.CONFIRM_SECONDS`` (300 s), the wall clock is
    the time again: the slots it passed over are behind, as after downtime — ``skip`` records
    them ``missed`` and runs the newest (a restart at that moment would do the same)."""
    passes = TimerPasses(monkeypatch)
    clock = ManualClock(T0)
    async with running([minutely()], sqlite_url, clock) as s:
        await clock.advance(30)
        await rows_until(s, [minute(0)])
        await clock.advance(20)
        seen = passes.mark()
        clock.set(minute(0, hour=13) + timedelta(seconds=20))  # +1 h
        await clock.advance(0)
        await passes.reach(minute(0) + timedelta(seconds=20), since=seen)  # seen at elapsed 50 s
        await clock.advance(40)  # 12:01 by elapsed time
        for n in range(1, 6):  # 12:01 … 12:05 come due on elapsed time (held 40 … 280 s)
            await rows_until(s, [minute(i) for i in range(n + 1)])
            await clock.advance(60)
        # held 340 s at "12:06": the step is followed, the wall clock says 13:06
        passed = [minute(i) for i in range(67)]
        rows = await rows_until(s, passed)
        assert s.running_engine().next_firing("minutely") == minute(7, hour=13)
    assert rows[:6] == [(minute(i), RunStatus.SUCCEEDED) for i in range(6)]
    assert rows[6:66] == [(minute(i), RunStatus.MISSED) for i in range(6, 66)]  # 12:06 … 13:05
    assert rows[66] == (minute(6, hour=13), RunStatus.SUCCEEDED)
    assert "wall clock stepped  byMs=+3600000" in caplog.text
    assert "wall clock step held 340 s — following it  byMs=+3600000" in caplog.text


async def test_a_backward_step_that_holds_is_followed_and_fires_no_slot_twice(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Once a step back has held, the wall clock is the time again: the slots up to the last
    one accounted for are not fired twice — quiet until the wall clock reaches the next, as
    for a process started then."""
    passes = TimerPasses(monkeypatch)
    clock = ManualClock(T0)
    async with running([minutely()], sqlite_url, clock) as s:
        await clock.advance(30)
        # 12:00's run ends before 12:01 comes, as it does a minute later in real time (a run
        # still going at 12:01 makes 12:01 an overlap skip)
        await rows_until(s, [minute(0)])
        await clock.advance(60)
        await rows_until(s, [minute(0), minute(1)])
        await clock.advance(10)
        seen = passes.mark()
        clock.set(minute(1, hour=11) + timedelta(seconds=10))  # -1 h
        await clock.advance(0)
        await passes.reach(minute(1) + timedelta(seconds=10), since=seen)  # seen at elapsed 100 s
        await clock.advance(50)
        for n in range(2, 7):  # 12:02 … 12:06 come due on elapsed time (held 50 … 290 s)
            await rows_until(s, [minute(i) for i in range(n + 1)])
            await clock.advance(60)
        # held 350 s: followed, the wall clock says 11:07:00; 12:07 is next
        await wait_until(lambda: "following it" in caplog.text, what="the step followed")
        replay = passes.mark()
        for _ in range(65):  # 11:07:00 … 12:06:35: the replayed hour fires nothing
            await clock.advance(55)
        await passes.reach(minute(6) + timedelta(seconds=35), since=replay)
        assert passes.dispatched(since=replay) == []
        assert len(await runs_of(s, "minutely")) == 7
        await clock.advance(25)  # 12:07:00
        rows = await rows_until(s, [minute(i) for i in range(8)])
    assert rows == [(minute(i), RunStatus.SUCCEEDED) for i in range(8)]
    assert "wall clock step held 350 s — following it  byMs=-3600000" in caplog.text
