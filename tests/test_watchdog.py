"""The watchdog: deadlines cancel overdue runs, and finished runs do not pile up in its heap."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
from support.waiting import wait_until

from fastapi_voltro_schedules.clock import Clock, SystemClock
from fastapi_voltro_schedules.enums import RunStatus, Trigger
from fastapi_voltro_schedules.store import RunRecord, Store, create_store
from fastapi_voltro_schedules.testing import ManualClock
from fastapi_voltro_schedules.watchdog import Watchdog, WatchedHerd

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


class Stop:
    """Stands for a run's task or cancel scope: records that the watchdog stopped it."""

    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name

    def cancel(self) -> None:
        self.log.append(self.name)


def watch_one(
    dog: Watchdog, clock: ManualClock, run_id: str, deadline: datetime, stop: Stop
) -> WatchedHerd:
    """A single firing's watch: a herd of one (run ``0``), started now."""
    herd = dog.watch_herd(deadline, (clock.monotonic(), clock.now()))
    herd.add(run_id, stop)
    return herd


async def test_finished_runs_leave_the_deadline_heap(sqlite_url: str) -> None:
    # 30-minute deadlines at 1,000 runs a second once kept 1.8 million dead entries alive.
    store = create_store(sqlite_url)
    try:
        clock = ManualClock(T0)
        dog = Watchdog(clock, store, "r1", heartbeat_ms=30_000)
        cancelled: list[str] = []
        live = watch_one(dog, clock, "keep", T0 + timedelta(minutes=30), Stop(cancelled, "keep"))
        for i in range(10_000):
            w = watch_one(dog, clock, f"r{i}", T0 + timedelta(minutes=30), Stop(cancelled, "x"))
            assert dog.end(w, 0) is False
        assert len(dog._deadlines) < 200
        assert any(entry is live for entry in dog._deadlines)
        # The survivor is still enforced; the finished ones are never cancelled.
        dog._expire(clock.monotonic() + 31 * 60)  # 31 minutes later (monotonic seconds)
        assert cancelled == ["keep"] and dog.end(live, 0) is True
    finally:
        await store.dispose()


async def step(clock: ManualClock, seconds: float) -> None:
    """Advance, then wait (real time: a beat is real I/O) until the watchdog is parked again:
    its pass for the new time — expiries, and the beat it writes before it sleeps — is over."""
    await clock.advance(seconds)
    await wait_until(lambda: clock.sleepers, what="the watchdog to go back to sleep")


async def _loop(dog: Watchdog, clock: ManualClock, body: Any) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(dog.run)
        await step(clock, 0)
        try:
            await body()
        finally:
            tg.cancel_scope.cancel()


async def test_a_forward_wall_step_does_not_cancel_a_run(sqlite_url: str) -> None:
    """NTP steps the wall clock an hour ahead: the run's 10-minute deadline is elapsed time,
    so it keeps running until 10 minutes have really passed."""
    store = create_store(sqlite_url)
    await store.create_schema()
    clock = ManualClock(T0)
    dog = Watchdog(clock, store, "r1", heartbeat_ms=5_000)
    cancelled: list[str] = []
    watched = watch_one(dog, clock, "run", T0 + timedelta(minutes=10), Stop(cancelled, "run"))

    async def body() -> None:
        clock.set(T0 + timedelta(hours=1))  # the step
        await step(clock, 1)
        assert cancelled == [] and not watched.timed_out
        await step(clock, 10 * 60 - 2)  # 9 min 59 s of elapsed time
        assert cancelled == []
        await step(clock, 1.5)
        assert cancelled == ["run"] and watched.timed_out == {0}

    try:
        await _loop(dog, clock, body)
    finally:
        await store.dispose()


async def test_a_backward_wall_step_does_not_extend_a_deadline(sqlite_url: str) -> None:
    store = create_store(sqlite_url)
    await store.create_schema()
    clock = ManualClock(T0)
    dog = Watchdog(clock, store, "r1", heartbeat_ms=5_000)
    cancelled: list[str] = []
    watch_one(dog, clock, "run", T0 + timedelta(seconds=30), Stop(cancelled, "run"))

    async def body() -> None:
        await step(clock, 10)
        clock.set(clock.now() - timedelta(hours=1))  # the step back
        await step(clock, 19)
        assert cancelled == []
        await step(clock, 1.5)  # 30.5 s elapsed in all
        assert cancelled == ["run"]

    try:
        await _loop(dog, clock, body)
    finally:
        await store.dispose()


async def running_row(store: Store, run_id: str, name: str) -> None:
    """A ``running`` row of replica ``r1``, fired at ``T0``: something for beats to land on."""
    await store.insert_run(
        RunRecord(
            id=run_id,
            name=name,
            scheduled_at=T0,
            status=RunStatus.RUNNING,
            trigger=Trigger.SELF,
            fired_at=T0,
            replica_id="r1",
        )
    )


async def beat_of(store: Store, run_id: str) -> datetime | None:
    run = await store.get_run(run_id)
    assert run is not None
    return run.heartbeat_at


async def test_beats_follow_elapsed_time_not_the_wall_clock(sqlite_url: str) -> None:
    """A run is beaten once it has run one interval of elapsed time; a wall step neither
    beats a fresh run early nor starves an old one."""
    store = create_store(sqlite_url)
    await store.create_schema()
    clock = ManualClock(T0)
    await running_row(store, "sr_beat", "job")
    dog = Watchdog(clock, store, "r1", heartbeat_ms=5_000)
    watch_one(dog, clock, "sr_beat", T0 + timedelta(hours=1), Stop([], "sr_beat"))

    async def body() -> None:
        clock.set(T0 + timedelta(hours=2))  # wall jumps 2 h: 0 s of elapsed time
        await step(clock, 1)  # parked again: a beat of this pass would be written by now
        assert await beat_of(store, "sr_beat") is None
        await step(clock, 5)
        # stamped with the wall clock the replica shows (the ledger's time)
        assert await beat_of(store, "sr_beat") == T0 + timedelta(hours=2, seconds=6)

    try:
        await _loop(dog, clock, body)
    finally:
        await store.dispose()


async def test_a_herd_watch_cancels_its_live_runs_at_the_deadline_and_leaves_no_entries(
    sqlite_url: str,
) -> None:
    """Runs started together under one deadline share one watch: the deadline cancels the
    ones still going (each reported timed out when it ends), not the ones already over; and
    finished herds do not pile up in the heap any more than finished runs do."""
    store = create_store(sqlite_url)
    try:
        clock = ManualClock(T0)
        dog = Watchdog(clock, store, "r1", heartbeat_ms=30_000)
        cancelled: list[str] = []
        herd = dog.watch_herd(T0 + timedelta(seconds=10), (clock.monotonic(), T0))
        places = [herd.add(name, Stop(cancelled, name)) for name in ("a", "b", "c")]
        assert places == [0, 1, 2]
        assert [dog.beats(n) for n in ("a", "b", "c", "z")] == [True, True, True, False]
        assert dog.end(herd, 0) is False  # over before its deadline
        assert not dog.beats("a") and dog.beats("b")  # going here: what the queue line asks
        dog._expire(clock.monotonic() + 9)
        assert cancelled == []
        dog._expire(clock.monotonic() + 10.5)
        assert cancelled == ["b", "c"]
        assert dog.end(herd, 2) is True and dog.end(herd, 1) is True
        assert herd.done and herd not in dog._herds
        for _ in range(1_000):
            other = dog.watch_herd(T0 + timedelta(minutes=30), (clock.monotonic(), T0))
            dog.end(other, other.add("x", Stop(cancelled, "x")))
        assert len(dog._deadlines) < 200
        assert cancelled == ["b", "c"]
    finally:
        await store.dispose()


async def test_a_herd_watch_beats_the_runs_still_going(sqlite_url: str) -> None:
    store = create_store(sqlite_url)
    await store.create_schema()
    clock = ManualClock(T0)
    for run_id in ("sr_done", "sr_going"):
        await running_row(store, run_id, run_id)
    dog = Watchdog(clock, store, "r1", heartbeat_ms=5_000)
    herd = dog.watch_herd(T0 + timedelta(hours=1), (clock.monotonic(), T0))
    done = herd.add("sr_done", Stop([], "sr_done"))
    herd.add("sr_going", Stop([], "sr_going"))
    dog.end(herd, done)

    async def body() -> None:
        await step(clock, 6)  # parked again: the beat is written
        assert await beat_of(store, "sr_going") == T0 + timedelta(seconds=6)
        assert await beat_of(store, "sr_done") is None

    try:
        await _loop(dog, clock, body)
    finally:
        await store.dispose()


def test_manual_clock_monotonic_moves_with_advance_only() -> None:
    clock = ManualClock(T0)
    assert clock.monotonic() == 0.0
    clock.set(T0 + timedelta(days=1))
    assert clock.monotonic() == 0.0
    anyio.run(clock.advance, 2.5)
    assert clock.monotonic() == 2.5
    with pytest.raises(ValueError, match="forward only"):
        anyio.run(clock.advance, -1)
    assert isinstance(SystemClock().monotonic(), float)
    assert isinstance(clock, Clock) and isinstance(SystemClock(), Clock)
