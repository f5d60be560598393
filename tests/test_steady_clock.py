"""The timer's clock (issue 29 item 14): the wall clock carried forward on the monotonic one,
following slewing at once and a step only once it has held (see test_clock_steps.py for the
timer on it)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from fastapi_voltro_schedules.clock import DatabaseClock, SteadyClock, SystemClock, steady
from fastapi_voltro_schedules.testing import ManualClock

T0 = datetime(2026, 6, 1, 11, 59, 30, tzinfo=UTC)


async def test_the_steady_clock_follows_slewing_and_holds_a_step() -> None:
    wall = ManualClock(T0)
    clock = SteadyClock(wall)
    assert clock.now() == T0
    await wall.advance(10)
    wall.set(wall.now() + timedelta(milliseconds=60))  # slewing: within tolerance, taken
    assert clock.now() == T0 + timedelta(seconds=10, milliseconds=60) and clock.step is None
    wall.set(wall.now() + timedelta(hours=1))  # a step: held
    assert clock.now() == T0 + timedelta(seconds=10, milliseconds=60)
    assert clock.step == timedelta(hours=1)
    await wall.advance(299)  # elapsed time moves the estimate; the step still held
    assert clock.now() == T0 + timedelta(seconds=309, milliseconds=60)
    await wall.advance(1)  # held 300 s: followed
    assert clock.now() == wall.now() == T0 + timedelta(hours=1, seconds=310, milliseconds=60)
    assert clock.step is None


async def test_a_step_undone_before_it_held_never_moved_the_steady_clock() -> None:
    wall = ManualClock(T0)
    clock = SteadyClock(wall)
    clock.now()
    wall.set(T0 + timedelta(hours=1))
    await wall.advance(200)
    assert clock.now() == T0 + timedelta(seconds=200)
    wall.set(T0 + timedelta(seconds=200))  # corrected back before it held
    await wall.advance(200)
    assert clock.now() == wall.now() == T0 + timedelta(seconds=400) and clock.step is None


async def test_a_second_step_restarts_the_hold() -> None:
    wall = ManualClock(T0)
    clock = SteadyClock(wall)
    clock.now()
    wall.set(T0 + timedelta(hours=1))
    await wall.advance(200)
    assert clock.now() == T0 + timedelta(seconds=200)
    wall.set(wall.now() - timedelta(hours=3))  # two hours behind the estimate now
    assert clock.now() == T0 + timedelta(seconds=200)
    await wall.advance(200)  # 400 s since the first step, 200 s since this one: held
    assert clock.now() == T0 + timedelta(seconds=400)
    assert clock.step == -timedelta(hours=2)
    await wall.advance(100)
    assert clock.now() == wall.now() == T0 - timedelta(hours=2) + timedelta(seconds=500)


def test_the_timer_reads_a_steady_clock() -> None:
    manual = ManualClock(T0)
    wrapped = steady(manual)
    assert isinstance(wrapped, SteadyClock) and wrapped.local is manual
    assert steady(wrapped) is wrapped
    database = DatabaseClock(manual, read=lambda: None)  # type: ignore[arg-type,return-value]
    assert steady(database) is database  # a local step does not move it already


def test_the_system_clock_counts_a_suspension_as_elapsed_time() -> None:
    """On Linux ``monotonic()`` is ``CLOCK_BOOTTIME``: a host that slept has its slots behind
    when it wakes (falling behind), not a wall step to hold."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    if boottime is None:
        pytest.skip("no CLOCK_BOOTTIME here")
    before = time.clock_gettime(boottime)
    reading = SystemClock().monotonic()
    assert before <= reading <= time.clock_gettime(boottime)
