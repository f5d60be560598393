"""The watchdog: deadlines cancel overdue runs, and finished runs do not pile up in its heap."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi_voltro_schedules.store import create_store
from fastapi_voltro_schedules.testing import ManualClock
from fastapi_voltro_schedules.watchdog import Watchdog

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


async def test_finished_runs_leave_the_deadline_heap(sqlite_url: str) -> None:
    # 30-minute deadlines at 1,000 runs a second once kept 1.8 million dead entries alive.
    store = create_store(sqlite_url)
    try:
        dog = Watchdog(ManualClock(T0), store, "r1", heartbeat_ms=30_000)
        cancelled: list[str] = []
        live = dog.watch("keep", T0, T0 + timedelta(minutes=30), lambda: cancelled.append("keep"))
        for i in range(10_000):
            w = dog.watch(f"r{i}", T0, T0 + timedelta(minutes=30), lambda: cancelled.append("x"))
            dog.unwatch(w)
        assert len(dog._deadlines) < 200
        assert any(entry[2] is live for entry in dog._deadlines)
        # The survivor is still enforced; the finished ones are never cancelled.
        dog._expire(T0 + timedelta(minutes=31))
        assert cancelled == ["keep"] and live.timed_out
    finally:
        await store.dispose()
