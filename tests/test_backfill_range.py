"""Range backfill in-process: bounds, confirmation, order, failures, the lock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import anyio
import pytest

from fastapi_voltro_schedules import (
    RunStatus,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    Trigger,
    define_schedule,
)
from fastapi_voltro_schedules.backfill import lock_is_stale
from fastapi_voltro_schedules.errors import (
    BackfillRefusedError,
    BackfillRequestError,
    ScheduleNotFoundError,
)
from fastapi_voltro_schedules.planning import DEAD_AFTER_BEATS
from fastapi_voltro_schedules.store import RunRecord, new_run_id
from fastapi_voltro_schedules.testing import ManualClock

NOW = datetime(2026, 8, 12, 12, 0, tzinfo=UTC)
FROM = "2026-08-10T00:00:00Z"


def hours(n: int) -> str:
    return (datetime(2026, 8, 10, tzinfo=UTC) + timedelta(hours=n)).isoformat()


def slot(n: int) -> datetime:
    return datetime(2026, 8, 10, tzinfo=UTC) + timedelta(hours=n)


class Recorder:
    def __init__(self, fail_at: datetime | None = None) -> None:
        self.contexts: list[ScheduleContext] = []
        self.fail_at = fail_at

    async def __call__(self, ctx: ScheduleContext) -> None:
        self.contexts.append(ctx)
        if ctx.scheduled_at == self.fail_at:
            raise RuntimeError("upstream refused this hour")


def scheduling(sqlite_url: str, handler: Recorder) -> Scheduling:
    hourly = define_schedule(name="hourly-sync", cron="0 * * * *", timezone="UTC", handler=handler)
    return Scheduling(
        [hourly],
        config=SchedulingConfig(database_url=sqlite_url, replica_id="ops"),
        clock=ManualClock(NOW),
    )


async def rows(s: Scheduling) -> list[RunRecord]:
    assert s.store is not None
    found = await s.store.list_runs("hourly-sync", limit=20_000)
    return sorted(found, key=lambda r: r.scheduled_at)


async def test_25_occurrences_run_without_confirmation(sqlite_url: str) -> None:
    handler = Recorder()
    async with scheduling(sqlite_url, handler).run(arm=False) as s:
        summary = await s.backfill("hourly-sync", FROM, hours(25))
        ledger = await rows(s)
    assert (summary.count, summary.fired, summary.succeeded, summary.failed) == (25, 25, 25, 0)
    assert [c.scheduled_at for c in handler.contexts] == [slot(n) for n in range(1, 26)]
    assert {c.trigger for c in handler.contexts} == {Trigger.MANUAL}
    assert all(c.fired_at == NOW for c in handler.contexts)
    assert [r.scheduled_at for r in ledger] == [slot(n) for n in range(1, 26)]
    assert {(r.status, r.trigger, r.coordination_outcome) for r in ledger} == {
        (RunStatus.SUCCEEDED, Trigger.MANUAL, "")
    }


async def test_26_occurrences_need_confirmation_and_refusal_fires_nothing(
    sqlite_url: str,
) -> None:
    handler = Recorder()
    async with scheduling(sqlite_url, handler).run(arm=False) as s:
        with pytest.raises(BackfillRefusedError) as info:
            await s.backfill("hourly-sync", FROM, hours(26))
        assert info.value.reason == "needs-confirmation" and info.value.count == 26
        assert "26 occurrences" in str(info.value) and "--yes" in str(info.value)
        assert handler.contexts == [] and await rows(s) == []
        summary = await s.backfill("hourly-sync", FROM, hours(26), confirm=True)
    assert summary.fired == 26 and len(handler.contexts) == 26


async def test_limit_and_ceiling(sqlite_url: str) -> None:
    handler = Recorder()
    async with scheduling(sqlite_url, handler).run(arm=False) as s:
        with pytest.raises(BackfillRefusedError) as info:
            await s.backfill("hourly-sync", FROM, hours(30), confirm=True, limit=28)
        assert info.value.reason == "over-limit" and info.value.count == 30
        assert "above the limit of 28" in str(info.value) and "nothing fired" in str(info.value)
        # The default limit is 1,000: 1,001 hourly slots is refused even when confirmed.
        with pytest.raises(BackfillRefusedError, match="1,001 occurrences, above the limit"):
            await s.backfill("hourly-sync", FROM, hours(1001), confirm=True)
        with pytest.raises(BackfillRequestError, match="above the hard ceiling of 10,000"):
            await s.backfill("hourly-sync", FROM, hours(5), limit=10_001)
        with pytest.raises(BackfillRefusedError, match="more than 10,000 occurrences"):
            await s.backfill("hourly-sync", FROM, hours(20_000), confirm=True, limit=10_000)
        assert handler.contexts == [] and await rows(s) == []


async def test_a_failing_slot_is_recorded_and_the_next_still_fires(sqlite_url: str) -> None:
    handler = Recorder(fail_at=slot(3))
    async with scheduling(sqlite_url, handler).run(arm=False) as s:
        summary = await s.backfill("hourly-sync", FROM, hours(5))
        ledger = await rows(s)
    assert (summary.fired, summary.succeeded, summary.failed) == (5, 4, 1)
    assert [r.status for r in ledger] == [
        RunStatus.SUCCEEDED, RunStatus.SUCCEEDED, RunStatus.FAILED,
        RunStatus.SUCCEEDED, RunStatus.SUCCEEDED,
    ]
    assert ledger[2].error_tag == "RuntimeError"
    assert [c.scheduled_at for c in handler.contexts] == [slot(n) for n in range(1, 6)]
    assert len({c.run_id for c in handler.contexts}) == 5


async def test_already_succeeded_slots_are_counted_and_run_again_only_under_all(
    sqlite_url: str,
) -> None:
    handler = Recorder()
    async with scheduling(sqlite_url, handler).run(arm=False) as s:
        assert s.store is not None
        await s.store.insert_runs(
            [
                RunRecord(
                    id=new_run_id(), name="hourly-sync", scheduled_at=slot(n),
                    status=RunStatus.SUCCEEDED, trigger=Trigger.SELF, fired_at=slot(n),
                    finished_at=slot(n), replica_id="old",
                )
                for n in (2, 4, 40)
            ]
        )
        with pytest.raises(BackfillRefusedError) as info:
            await s.backfill("hourly-sync", FROM, hours(30), reprocess="all")
        assert info.value.already_succeeded == 2
        assert "2 of them already succeeded and would run again" in str(info.value)
        # The default (reprocess="none"): the two that succeeded are counted, not run.
        kept = await s.backfill("hourly-sync", FROM, hours(5))
        assert (kept.already_succeeded, kept.fired, kept.kept) == (2, 3, 2)
        assert [c.scheduled_at for c in handler.contexts] == [slot(1), slot(3), slot(5)]
        summary = await s.backfill("hourly-sync", FROM, hours(5), reprocess="all")
    # every slot succeeded by now, and all five run again
    assert summary.already_succeeded == 5 and summary.fired == 5


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [
        (hours(5), hours(5), "is not before"),
        (hours(6), hours(5), "is not before"),
        ("yesterday", hours(5), "is not an ISO-8601 instant"),
        ("2026-08-10T00:00:00", hours(5), "has no zone"),
    ],
)
async def test_bad_requests(sqlite_url: str, start: str, end: str, message: str) -> None:
    async with scheduling(sqlite_url, Recorder()).run(arm=False) as s:
        with pytest.raises(BackfillRequestError, match=message):
            await s.backfill("hourly-sync", start, end)
        with pytest.raises(ScheduleNotFoundError, match='no schedule named "nope"'):
            await s.backfill("nope", FROM, hours(1))


async def test_two_ranges_of_one_schedule_never_interleave(sqlite_url: str) -> None:
    release = anyio.Event()
    entered = anyio.Event()

    async def slow(ctx: ScheduleContext) -> None:
        entered.set()
        await release.wait()

    hourly = define_schedule(name="hourly-sync", cron="0 * * * *", timezone="UTC", handler=slow)
    clock = ManualClock(NOW)
    s = Scheduling(
        [hourly], config=SchedulingConfig(database_url=sqlite_url, replica_id="ops"), clock=clock
    )
    async with s.run(arm=False), anyio.create_task_group() as tg:
        tg.start_soon(s.backfill, "hourly-sync", FROM, hours(2))
        await entered.wait()
        with pytest.raises(BackfillRefusedError) as info:
            await s.backfill("hourly-sync", FROM, hours(2))
        assert info.value.reason == "in-progress" and "held by ops" in str(info.value)
        release.set()
    # The lock was released: the next range runs.
    async with s.run(arm=False):
        summary = await s.backfill("hourly-sync", FROM, hours(1), reprocess="all")
    assert summary.fired == 1


async def test_a_plan_is_refused_up_front_while_a_live_range_holds_the_lock(
    sqlite_url: str,
) -> None:
    """``plan_backfill`` answers ``in-progress`` with the count before anything starts — the
    HTTP route's 409, the CLI's and Python's alike; a lock silent for more than the dead
    silence (``DEAD_AFTER_BEATS`` beats, as for a run's row) does not hold a plan back."""
    handler = Recorder()
    async with scheduling(sqlite_url, handler).run(arm=False) as s:
        assert s.store is not None
        beats = timedelta(milliseconds=DEAD_AFTER_BEATS * s.config.schedule_heartbeat_ms)
        await s.store.claim("hourly-sync@range-backfill", "other-pod", NOW - beats)
        with pytest.raises(BackfillRefusedError) as info:
            await s.plan_backfill("hourly-sync", FROM, hours(2))
        assert (info.value.reason, info.value.count) == ("in-progress", 2)
        assert "held by other-pod" in str(info.value)
        assert isinstance(s.clock, ManualClock)
        s.clock.set(NOW + timedelta(milliseconds=1))  # one millisecond past the dead silence
        plan = await s.plan_backfill("hourly-sync", FROM, hours(2))
        assert plan.count == 2
    assert handler.contexts == []


@pytest.mark.parametrize(
    ("silent_ms", "stale"),
    [(0, False), (DEAD_AFTER_BEATS * 30_000, False), (DEAD_AFTER_BEATS * 30_000 + 1, True)],
)
def test_a_range_lock_is_stale_after_the_dead_silence(silent_ms: int, stale: bool) -> None:
    claimed = NOW - timedelta(milliseconds=silent_ms)
    assert lock_is_stale(claimed, NOW, heartbeat_ms=30_000) is stale


async def test_a_dead_holders_lock_is_taken_over(sqlite_url: str) -> None:
    handler = Recorder()
    async with scheduling(sqlite_url, handler).run(arm=False) as s:
        assert s.store is not None
        # A process died mid-backfill 5 minutes ago (heartbeat 30 s: dead after 90 s).
        await s.store.claim("hourly-sync@range-backfill", "dead-pod", NOW - timedelta(minutes=5))
        summary = await s.backfill("hourly-sync", FROM, hours(2))
        assert await s.store.claim_holder("hourly-sync@range-backfill") is None
    assert summary.fired == 2
