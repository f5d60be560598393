"""Liveness across replicas on one clock: the shared database's (``clock.DatabaseClock``).

A replica judges another's ``running`` row by the timestamps written into it. On each host's
own wall clock, a replica whose clock stepped forward by an hour reads every other replica's
live run as silent, marks it ``failed/abandoned`` and, under ``skip``, starts a second run
beside it. With the real clock on a server store, ``Scheduling`` stamps and judges by the
database's clock, carried forward on the monotonic clock, so no host's wall clock matters.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import anyio
import pytest
from support.clocks import SteppedClock
from support.waiting import HANG

from fastapi_voltro_schedules import (
    RunStatus,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_schedule,
)
from fastapi_voltro_schedules.clock import DatabaseClock
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.testing import ManualClock

HEARTBEAT_MS = 20_000
"""A run silent for 3 beats (60 s, a hang) is dead: a one-hour step is far past it, while a
busy machine's stall between a beat and a judgement never is."""
ESTIMATE_ERROR = timedelta(seconds=5)
"""Bound on how far the database clock's estimate can be from the host's (the database runs on
this host): half the quickest of its reads' round trips, and a read slower than the statement
timeout (5 s) fails instead of answering — a bound the product keeps, however busy the host."""
STEP = timedelta(hours=1)


# ------------------------------------------------------------------------- the clock itself


async def test_the_estimate_moves_with_monotonic_time_not_with_a_wall_step() -> None:
    local = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    database_time = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)

    async def read() -> datetime:
        return database_time

    clock = DatabaseClock(local, read)
    await clock.resync()
    assert clock.now() == database_time
    assert clock.offset == database_time - local.now()

    await local.advance(2.5)  # elapsed time: the estimate follows
    assert clock.now() == database_time + timedelta(seconds=2.5)
    local.set(local.now() + timedelta(hours=5))  # a wall step: the estimate does not
    assert clock.now() == database_time + timedelta(seconds=2.5)
    assert clock.monotonic() == local.monotonic()

    database_time += timedelta(seconds=10)  # the next read follows the database
    await clock.resync()
    assert clock.now() == database_time

    # a host clock within the tolerance is used as it is (finer than a read over the network)
    near = DatabaseClock(local, read, tolerance=timedelta(milliseconds=50))
    await near.resync()
    local.set(database_time + timedelta(milliseconds=30))
    assert near.now() == local.now()
    local.set(database_time + timedelta(milliseconds=80))
    assert near.now() == database_time


# ---------------------------------------------------------------- two replicas, one stepped


def _slow_schedule(release: anyio.Event, started: list[str]) -> object:
    async def slow(ctx: ScheduleContext) -> None:
        started.append(ctx.run_id)
        await release.wait()

    return define_schedule(
        name="slow",
        cron="* * * * * *",
        timezone="UTC",
        handler=slow,
        on_overlap="skip",
        max_runtime_ms=60_000,
    )


@pytest.mark.parametrize("store", ["postgres", "mariadb"])
async def test_a_replica_whose_clock_stepped_forward_leaves_another_replicas_run_alone(
    store: str, request: pytest.FixtureRequest
) -> None:
    url: str = request.getfixturevalue(f"{store}_url")
    await upgrade_to_head(url)
    release = anyio.Event()
    started_b: list[str] = []
    started_a: list[str] = []

    def config(replica: str) -> SchedulingConfig:
        return SchedulingConfig(
            database_url=url,
            replica_id=replica,
            schedule_heartbeat_ms=HEARTBEAT_MS,
            shutdown_grace_ms=0,
        )

    # Replica b (true clock) holds a long run of "slow"; it only serves Run now (its timer
    # would fire the schedule too, so it is given the schedule under arm=False).
    b = Scheduling([_slow_schedule(release, started_b)], config=config("pod-b"))
    a = Scheduling(
        [_slow_schedule(release, started_a)], config=config("pod-a"), clock=SteppedClock(STEP)
    )
    async with b.run(arm=False):
        held = await b.fire_now("slow")
        with anyio.fail_after(HANG):
            while not started_b:
                await anyio.sleep(0.02)
        # pod-a boots with its wall clock an hour ahead: it reads the time from the database
        booted = datetime.now(UTC)
        async with a.run():
            a_clock = a.clock
            a_now, host_now = a.clock.now(), datetime.now(UTC)
            assert a.store is not None
            # its boot reap and three of its every-second firings have judged pod-b's run
            with anyio.fail_after(HANG):
                while True:
                    rows = await a.store.list_runs("slow", limit=100)
                    skipped = [r for r in rows if r.status is RunStatus.SKIPPED]
                    if len(skipped) >= 3:
                        break
                    await anyio.sleep(0.05)
            assert a.engine is not None
            await a.engine.maintenance.reap()
            during = await a.store.get_run(held.id)
        release.set()
        assert b.store is not None
        with anyio.fail_after(HANG):
            while (done := await b.store.get_run(held.id)) is None or not done.status.terminal:
                await anyio.sleep(0.02)
    assert during is not None and during.status is RunStatus.RUNNING, during
    assert started_a == [], "pod-a started a second run beside pod-b's live one"
    assert all(r.replica_id == "pod-a" and r.trigger == "self" for r in skipped)
    assert (done.status, done.error_tag) == (RunStatus.SUCCEEDED, None), done
    # pod-a ran on the database's clock, and the stamps it wrote are not an hour ahead
    assert isinstance(a_clock, DatabaseClock)
    assert abs(a_clock.offset + STEP) < ESTIMATE_ERROR, a_clock.offset
    assert abs(a_now - host_now) < ESTIMATE_ERROR
    ended = datetime.now(UTC)
    assert all(
        booted - ESTIMATE_ERROR <= r.fired_at <= ended + ESTIMATE_ERROR for r in skipped
    ), (booted, ended, skipped)
    assert isinstance(a.clock, SteppedClock)  # given back after the run


async def test_a_failed_clock_read_at_boot_is_logged_and_the_host_clock_stands_in(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The schema check has just reached the database: one failed read of its clock is a blip,
    not a reason to refuse to boot. The host's clock stands in until the next read."""
    from fastapi_voltro_schedules.errors import StoreUnavailableError
    from fastapi_voltro_schedules.store import SQLStore

    await upgrade_to_head(postgres_url)

    async def unreachable(self: SQLStore) -> datetime:
        raise StoreUnavailableError("database_now: connection refused")

    monkeypatch.setattr(SQLStore, "database_now", unreachable)
    scheduling = Scheduling(
        [], config=SchedulingConfig(database_url=postgres_url, replica_id="pod-a")
    )
    async with scheduling.run():
        clock = scheduling.clock
        assert isinstance(clock, DatabaseClock)
        assert abs(clock.now() - datetime.now(UTC)) < timedelta(seconds=5)
    assert "could not read the database's clock at boot" in caplog.text
