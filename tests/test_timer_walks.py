"""The timer's walk of a herd: schedules on one cron due at one instant share one walk of the
cron, however each was armed — declared at boot, or written at run time one by one, each from
the instant of its own write (issue 31's herd of written schedules walked the cron 10,000 times
at its instant, ~0.4 s of loop before the first handler). And sharing never changes what each
one owes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest

from fastapi_voltro_schedules import define_schedule
from fastapi_voltro_schedules import timer as timer_module
from fastapi_voltro_schedules.fire_requests import Due
from fastapi_voltro_schedules.testing import ManualClock
from fastapi_voltro_schedules.timer import Timer

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


class Door:
    """Stands for the dispatcher: keeps what the timer hands it."""

    def __init__(self) -> None:
        self.handed: list[Due] = []

    def spawn(self, fn: Any, due: Due) -> None:
        self.handed.append(due)

    async def fire(self, due: Due) -> None:  # pragma: no cover - spawn keeps it
        raise AssertionError


def _job(name: str, cron: str) -> Any:
    return define_schedule(name=name, cron=cron, timezone="UTC", handler=lambda ctx: None)


def test_schedules_armed_at_different_instants_share_one_walk_and_owe_the_same_slots(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    walks: list[datetime] = []
    real = timer_module.passed_slots

    def counting(spec: Any, after: datetime, now: datetime) -> Any:
        walks.append(after)
        return real(spec, after, now)

    monkeypatch.setattr(timer_module, "passed_slots", counting)
    door = Door()
    timer = Timer(ManualClock(T0), door)  # type: ignore[arg-type]
    # 200 written one by one over a minute (each armed from its own write), due at 12:05;
    # one more armed before 12:01, which it owes too; and one on another cron
    written = [_job(f"w{i}", "5 12 * * *") for i in range(200)]
    for i, job in enumerate(written):
        timer.arm(job, T0 + timedelta(seconds=30 + i * 0.2))
    early = _job("early", "*/1 12 * * *")
    timer.arm(early, T0 + timedelta(seconds=30))
    other = _job("other", "5 12 * * *")
    timer.arm(other, T0 - timedelta(days=1, minutes=1))  # last planned yesterday 11:59

    assert timer.dispatch_due(T0 + timedelta(minutes=5, seconds=1))
    [due] = door.handed
    owed = dict(zip((s.name for s in due.schedules), due.slots, strict=True))
    at_five = T0 + timedelta(minutes=5)
    assert all(owed[job.name] == [at_five] for job in written)
    assert owed["other"] == [T0 - timedelta(hours=23, minutes=55), at_five]  # fell behind
    assert owed["early"] == [T0 + timedelta(minutes=m) for m in range(1, 6)]
    # one walk for the 200, one for the schedule behind (its first slot differs), one for the
    # other cron
    assert len(walks) == 3
    # and each moved on to the same next slot, tomorrow's, as one walk again
    assert {timer.next_firing(job.name) for job in written} == {at_five + timedelta(days=1)}


async def test_the_time_a_quiet_moment_takes_comes_out_of_the_sleep_after_it() -> None:
    """A quiet moment may run a full collection (0.3–0.9 s on a busy host): the sleep after it
    ends at the next instant, not that long past it (measured before the collection, the sleep
    overslept, and a herd right after the quiet moment started 0.4–0.9 s late)."""
    door = Door()
    clock = ManualClock(T0)
    timer = Timer(clock, door)  # type: ignore[arg-type]

    def collecting() -> None:  # the collection takes 0.8 s of the clock
        clock._monotonic += 0.8
        clock.set(clock.now() + timedelta(seconds=0.8))

    timer.quiet = collecting
    timer.arm(_job("herd", "20 0 12 * * *"), T0)  # due at 12:00:20
    async with anyio.create_task_group() as tg:
        tg.start_soon(timer.run)
        await clock.advance(0)  # armed, and the quiet moment took 0.8 s
        await clock.advance(19.1)  # 12:00:19.9
        assert not door.handed
        await clock.advance(0.1)  # 12:00:20: due, not 0.8 s later
        assert len(door.handed) == 1
        tg.cancel_scope.cancel()
