"""The self-trigger engine under an injected clock: time moves, nobody sleeps for minutes."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
from support.running import running, runs_of
from support.timer_passes import TimerPasses
from support.waiting import HANG, wait_until

from fastapi_voltro_schedules import (
    RunStatus,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    Trigger,
    define_schedule,
)
from fastapi_voltro_schedules.coordination.inflight import InFlight
from fastapi_voltro_schedules.coordination.skip import SkipRule
from fastapi_voltro_schedules.errors import RunNowBusyError, StoreUnavailableError
from fastapi_voltro_schedules.store import RunRecord, new_run_id
from fastapi_voltro_schedules.testing import ManualClock

T0 = datetime(2026, 6, 1, 11, 59, 30, tzinfo=UTC)


def minute(n: int) -> datetime:
    return datetime(2026, 6, 1, 12, n, tzinfo=UTC)


async def test_rearms_after_a_throwing_handler(sqlite_url: str) -> None:
    calls: list[datetime] = []

    @define_schedule(name="boom", cron="* * * * *", timezone="UTC")
    async def boom(ctx: ScheduleContext) -> None:
        calls.append(ctx.scheduled_at)
        raise ValueError("handler defect")

    clock = ManualClock(T0)
    async with running([boom], sqlite_url, clock) as s:
        for n in range(3):
            await clock.advance(60 if n else 30)

            async def finished(n: int = n) -> bool:
                rows = await runs_of(s, "boom")
                return len(rows) == n + 1 and rows[-1].status.terminal

            await wait_until(finished)
        rows = await runs_of(s, "boom")
    assert [r.scheduled_at for r in rows] == [minute(0), minute(1), minute(2)]
    assert all(r.status is RunStatus.FAILED and r.error_tag == "ValueError" for r in rows)
    assert rows[0].error_message == "handler defect"
    assert all(r.trigger is Trigger.SELF and r.coordination_outcome == "single" for r in rows)
    assert calls == [minute(0), minute(1), minute(2)]


async def test_yearly_schedule_waits_in_chunks_and_never_fires_early(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fired: list[datetime] = []
    passes = TimerPasses(monkeypatch)

    @define_schedule(name="yearly", cron="0 0 1 1 *", timezone="UTC")
    async def yearly(ctx: ScheduleContext) -> None:
        fired.append(ctx.scheduled_at)

    clock = ManualClock(datetime(2026, 1, 2, tzinfo=UTC))
    async with running([yearly], sqlite_url, clock) as s:
        assert s.engine is not None
        assert s.engine.next_firing("yearly") == datetime(2027, 1, 1, tzinfo=UTC)
        # Many chunked wakes across the year: each re-evaluates and fires nothing.
        for _ in range(50):
            await clock.advance(30)
        eve = datetime(2026, 12, 31, 23, 59, 59, 900000, tzinfo=UTC)
        await clock.advance((eve - clock.now()).total_seconds())  # elapsed time, not a step
        await passes.reach(eve)  # the timer has looked at 0.1 s before the instant…
        assert passes.dispatched() == []  # …and at every wake before it: nothing handed on
        assert fired == [] and await runs_of(s, "yearly") == []
        await clock.advance(0.1)

        async def one() -> bool:
            return len(fired) == 1

        await wait_until(one)
    assert fired == [datetime(2027, 1, 1, tzinfo=UTC)]


async def test_falling_behind_runs_newest_and_records_skipped_slots(sqlite_url: str) -> None:
    """An hour of elapsed time passes in one wake (a busy loop, a suspended host or VM): the
    slots passed are behind, and the backfill policy (``skip``) decides. A step of the wall
    clock alone is another matter (test_clock_steps.py)."""

    @define_schedule(name="minutely", cron="* * * * *", timezone="UTC")
    async def minutely(ctx: ScheduleContext) -> None:
        return None

    clock = ManualClock(T0)
    async with running([minutely], sqlite_url, clock) as s:
        await clock.advance(30)  # 12:00 fires normally

        async def count(n: int) -> bool:
            return len(await runs_of(s, "minutely")) >= n

        await wait_until(lambda: count(1))
        await clock.advance(3600 + 20)  # wall and elapsed time: 13:00:20

        async def caught_up() -> bool:
            rows = await runs_of(s, "minutely")
            return len(rows) >= 61 and all(r.status.terminal for r in rows)

        # All written and 13:00's run over, the timer at 13:01: nothing else will write.
        await wait_until(caught_up)
        assert s.running_engine().next_firing("minutely") == datetime(2026, 6, 1, 13, 1, tzinfo=UTC)
        rows = await runs_of(s, "minutely")
    assert len(rows) == 61
    assert [r.scheduled_at for r in rows] == [minute(0) + timedelta(minutes=i) for i in range(61)]
    assert rows[0].status is RunStatus.SUCCEEDED  # 12:00
    assert all(r.status is RunStatus.MISSED for r in rows[1:60])  # 12:01 … 12:59, never silent
    assert rows[60].status is RunStatus.SUCCEEDED  # 13:00, the newest, runs now


async def test_watchdog_cancels_an_async_handler(sqlite_url: str) -> None:
    cleaned_up = anyio.Event()
    started = anyio.Event()

    @define_schedule(name="stuck", cron="0 12 * * *", timezone="UTC", max_runtime_ms=5_000)
    async def stuck(ctx: ScheduleContext) -> None:
        assert ctx.deadline == ctx.fired_at + timedelta(seconds=5)
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            cleaned_up.set()

    clock = ManualClock(T0)
    async with running([stuck], sqlite_url, clock) as s:
        await clock.advance(30)
        with anyio.fail_after(HANG):
            await started.wait()
        await clock.advance(4.9)
        assert not cleaned_up.is_set()
        await clock.advance(0.2)
        with anyio.fail_after(HANG):
            await cleaned_up.wait()

        async def failed() -> bool:
            rows = await runs_of(s, "stuck")
            return bool(rows) and rows[0].status is RunStatus.FAILED

        await wait_until(failed)
        (row,) = await runs_of(s, "stuck")
    assert row.error_tag == "timeout"
    assert row.finished_at is not None


async def test_watchdog_abandons_a_thread_handler(sqlite_url: str) -> None:
    release = threading.Event()
    entered = threading.Event()

    @define_schedule(name="blocking", cron="0 12 * * *", timezone="UTC", max_runtime_ms=2_000)
    def blocking(ctx: ScheduleContext) -> None:
        entered.set()
        release.wait(HANG)  # released by the test's end; abandoned long before

    clock = ManualClock(T0)
    try:
        async with running([blocking], sqlite_url, clock) as s:
            await clock.advance(30)
            await wait_until(lambda: anyio.to_thread.run_sync(entered.is_set))
            await clock.advance(2.5)

            async def failed() -> bool:
                rows = await runs_of(s, "blocking")
                return bool(rows) and rows[0].status is RunStatus.FAILED

            await wait_until(failed)
            (row,) = await runs_of(s, "blocking")
            assert row.error_tag == "timeout"
            assert "thread was abandoned" in (row.error_message or "")
            assert not release.is_set()  # the thread is still blocked: it was abandoned
    finally:
        release.set()


async def test_heartbeat_bumps_a_long_run_and_not_a_short_one(sqlite_url: str) -> None:
    release = anyio.Event()
    entered = anyio.Event()

    @define_schedule(name="long", cron="0 12 * * *", timezone="UTC", on_overlap="parallel")
    async def long(ctx: ScheduleContext) -> None:
        entered.set()
        await release.wait()

    @define_schedule(name="short", cron="0 12 * * *", timezone="UTC")
    async def short(ctx: ScheduleContext) -> None:
        return None

    clock = ManualClock(T0)
    async with running([long, short], sqlite_url, clock, schedule_heartbeat_ms=1000) as s:
        await clock.advance(30)

        async def short_done() -> bool:
            rows = await runs_of(s, "short")
            return bool(rows) and rows[0].status is RunStatus.SUCCEEDED

        async def long_running() -> bool:
            return bool(await runs_of(s, "long"))

        await wait_until(short_done)
        await wait_until(long_running)
        # The handler itself has started, so the watchdog watches it from this instant: a row
        # alone does not say so, and a run watched only after the next advance would beat a
        # second later than the loop below expects.
        with anyio.fail_after(HANG):
            await entered.wait()
        assert (await runs_of(s, "long"))[0].heartbeat_at is None
        for beat in range(1, 4):
            await clock.advance(1.0)
            expected = T0 + timedelta(seconds=30 + beat)

            async def beaten(expected: datetime = expected) -> bool:
                return (await runs_of(s, "long"))[0].heartbeat_at == expected

            await wait_until(beaten)
        release.set()

        async def long_done() -> bool:
            return (await runs_of(s, "long"))[0].status is RunStatus.SUCCEEDED

        await wait_until(long_done)
        (short_row,) = await runs_of(s, "short")
    assert short_row.heartbeat_at is None


async def rows_once(s: Scheduling, name: str, n: int) -> list[RunRecord]:
    """``name``'s rows, once there are ``n``."""

    async def counted() -> bool:
        return len(await runs_of(s, name)) == n

    await wait_until(counted, what=f"{n} rows of {name}")
    return await runs_of(s, name)


async def rows_ended(s: Scheduling, name: str) -> list[RunRecord]:
    """``name``'s rows, once every one is terminal."""

    async def ended() -> bool:
        return all(r.status.terminal for r in await runs_of(s, name))

    await wait_until(ended, what=f"every row of {name} terminal")
    return await runs_of(s, name)


@pytest.mark.parametrize("policy", ["skip", "parallel"])
async def test_overlap_skip_and_parallel(
    sqlite_url: str, policy: str, caplog: pytest.LogCaptureFixture
) -> None:
    release = anyio.Event()

    @define_schedule(name="slow", cron="* * * * *", timezone="UTC", on_overlap=policy)
    async def slow(ctx: ScheduleContext) -> None:
        await release.wait()

    clock = ManualClock(T0)
    with caplog.at_level(logging.INFO, logger="fastapi_voltro_schedules"):
        async with running([slow], sqlite_url, clock) as s:
            await clock.advance(30)

            await rows_once(s, "slow", 1)
            await clock.advance(60)
            rows = await rows_once(s, "slow", 2)
            release.set()
            final = await rows_ended(s, "slow")
    assert rows[0].status is RunStatus.RUNNING
    if policy == "skip":
        assert rows[1].status is RunStatus.SKIPPED and rows[1].scheduled_at == minute(1)
        assert [r.status for r in final] == [RunStatus.SUCCEEDED, RunStatus.SKIPPED]
        assert any(
            r.getMessage()
            == "schedule: overlap skip  name=slow scope=process heldBy=replica-a lastSeenMs=60000"
            for r in caplog.records
        )
    else:
        assert rows[1].status is RunStatus.RUNNING
        assert [r.status for r in final] == [RunStatus.SUCCEEDED, RunStatus.SUCCEEDED]


@pytest.mark.parametrize("first", ["written", "lost"])
async def test_overlap_skip_waits_for_the_answer_of_a_row_being_written(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, first: str
) -> None:
    """A skip schedule's next slot, admitted while its first run's row is being written, waits
    for that write's answer before it judges overlap: written (the row committed, the insert's
    await not over yet), the first run holds the schedule and the second slot is skipped —
    under load this gap ran both (found by ci-under-load); lost (here: the store failed), the
    first never runs and the second slot runs — judged before the answer, it stood down for a
    run that never ran (tests/test_rowless_claims.py caught that on the servers)."""
    release, gate, first_sent = anyio.Event(), anyio.Event(), anyio.Event()
    asked: list[RunRecord | None] = []
    waited: list[str] = []
    held_here, wait_decided = SkipRule.held_here, InFlight.wait_decided

    def recorded(rule: SkipRule, schedule: Any) -> RunRecord | None:
        holder = held_here(rule, schedule)
        asked.append(holder)
        return holder

    async def waiting(inflight: InFlight, name: str) -> None:
        waited.append(name)
        await wait_decided(inflight, name)

    monkeypatch.setattr(SkipRule, "held_here", recorded)
    monkeypatch.setattr(InFlight, "wait_decided", waiting)

    @define_schedule(name="slow", cron="* * * * *", timezone="UTC", on_overlap="skip")
    async def slow(ctx: ScheduleContext) -> None:
        await release.wait()

    clock = ManualClock(T0)
    async with running([slow], sqlite_url, clock) as s:
        assert s.store is not None
        insert_runs = s.store.insert_runs

        async def insert_then_hold(runs: Any) -> None:
            if first_sent.is_set():
                await insert_runs(runs)
                return
            first_sent.set()
            if first == "lost":
                await gate.wait()
                raise StoreUnavailableError("the first row's write failed")
            await insert_runs(runs)
            await gate.wait()  # the first row is in the ledger; its admission waits

        monkeypatch.setattr(s.store, "insert_runs", insert_then_hold)
        await clock.advance(30)
        await wait_until(lambda: _true(first_sent.is_set()), what="the first row sent")
        await clock.advance(60)
        await wait_until(lambda: _true(waited == ["slow"]), what="the second slot waiting")
        assert len(asked) == 1  # the second slot has not judged yet
        gate.set()

        async def second_slot() -> list[RunRecord] | None:
            rows = await runs_of(s, "slow")
            return rows if any(r.scheduled_at == minute(1) for r in rows) else None

        rows = await wait_until(second_slot, what="a row of the second slot")
        release.set()
        await rows_ended(s, "slow")
    if first == "written":
        assert asked[0] is None and asked[1] is not None and asked[1].id == rows[0].id
        assert [r.status for r in rows] == [RunStatus.RUNNING, RunStatus.SKIPPED]
    else:
        assert asked == [None, None]
        # the first slot is a hole (recorded missed once the store answers), never a run
        assert [(r.status, r.scheduled_at) for r in rows if r.status is not RunStatus.MISSED] == [
            (RunStatus.RUNNING, minute(1))
        ]


async def _true(value: bool) -> bool:
    return value


async def test_fire_now_ignores_overlap_and_records_manual(sqlite_url: str) -> None:
    release = anyio.Event()
    seen: list[ScheduleContext] = []

    @define_schedule(name="slow", cron="0 12 * * *", timezone="UTC")
    async def slow(ctx: ScheduleContext) -> None:
        seen.append(ctx)
        await release.wait()

    clock = ManualClock(T0)
    async with running([slow], sqlite_url, clock) as s:
        await clock.advance(30)  # 12:00: the timer's own run of "slow" holds it
        await wait_until(lambda: _true(len(seen) == 1))
        first = await s.fire_now("slow")  # overlap rule ignored: operators expect it to fire
        assert first.status is RunStatus.RUNNING and first.trigger is Trigger.MANUAL
        assert first.scheduled_at == T0 + timedelta(seconds=30)
        assert first.coordination_outcome == ""
        # ...but one Run now of a schedule in flight per process (docs/engine.md, "Run now").
        with pytest.raises(RunNowBusyError):
            await s.fire_now("slow")
        release.set()

        async def done() -> bool:
            rows = await runs_of(s, "slow")
            return len(rows) == 2 and all(r.status is RunStatus.SUCCEEDED for r in rows)

        await wait_until(done)
        # The Run now is over once its task lets the schedule go, just after the row's write.
        dispatcher = s.running_engine().dispatcher
        await wait_until(lambda: "slow" not in dispatcher._manual, what="the Run now to end")
        second = await s.fire_now("slow")  # the first is recorded: Run now runs again
        await wait_until(lambda: _true(len(seen) == 3))
    assert [c.trigger for c in seen] == [Trigger.SELF, Trigger.MANUAL, Trigger.MANUAL]
    assert {c.run_id for c in seen[1:]} == {first.id, second.id}


async def test_shutdown_cancels_in_flight_runs_after_grace(sqlite_url: str) -> None:
    from fastapi_voltro_schedules.store import create_store

    started = anyio.Event()

    @define_schedule(name="forever", cron="0 12 * * *", timezone="UTC")
    async def forever(ctx: ScheduleContext) -> None:
        started.set()
        await anyio.sleep_forever()

    clock = ManualClock(T0)
    async with running([forever], sqlite_url, clock, shutdown_grace_ms=50):
        await clock.advance(30)
        with anyio.fail_after(HANG):
            await started.wait()
    store = create_store(sqlite_url)
    try:
        (row,) = await store.list_runs("forever")
    finally:
        await store.dispose()
    assert row.status is RunStatus.FAILED and row.error_tag == "shutdown"


async def test_retention_sweeps_finished_rows_and_keeps_queued(sqlite_url: str) -> None:
    clock = ManualClock(T0)

    @define_schedule(name="job", cron="0 0 1 1 *", timezone="UTC")
    async def job(ctx: ScheduleContext) -> None:
        return None

    async with running([job], sqlite_url, clock, run_retention_ms=24 * 3600 * 1000) as s:
        assert s.store is not None and s.engine is not None
        old = T0 - timedelta(days=3)

        def row(status: RunStatus, finished: datetime | None) -> RunRecord:
            return RunRecord(
                id=new_run_id(), name="job", scheduled_at=old, status=status,
                trigger=Trigger.SELF, fired_at=old, finished_at=finished, replica_id="r",
            )

        await s.store.insert_runs(
            [row(RunStatus.SUCCEEDED, old) for _ in range(5)]
            + [row(RunStatus.QUEUED, None), row(RunStatus.SUCCEEDED, T0 - timedelta(hours=1))]
        )
        assert await s.engine.maintenance.sweep() == 5
        left = await runs_of(s, "job")
    assert sorted(r.status.value for r in left) == ["queued", "succeeded"]


class RecordingStarter:
    def __init__(self) -> None:
        self.started: list[tuple[str, dict[str, Any]]] = []

    async def start(self, name: str, payload: dict[str, Any]) -> str:
        self.started.append((name, payload))
        return f"wf-{len(self.started)}"


async def test_workflow_targets_call_the_configured_starter(sqlite_url: str) -> None:
    from fastapi import FastAPI

    from fastapi_voltro_schedules import WorkflowTarget

    starter = RecordingStarter()
    seen: list[ScheduleContext] = []
    rollup = define_schedule(
        name="dailyRollup",
        cron="0 12 * * *",
        timezone="UTC",
        workflow=WorkflowTarget(
            name="billing.dailyRollup",
            payload=lambda ctx: {"day": ctx.scheduled_at.date().isoformat(), "run": ctx.run_id},
        ),
    )

    @define_schedule(name="manual", cron="0 12 * * *", timezone="UTC")
    async def by_hand(ctx: ScheduleContext) -> None:
        seen.append(ctx)
        assert ctx.workflows is not None
        await ctx.workflows.start("billing.reindex", {"from": "handler"})

    app = FastAPI()
    config = SchedulingConfig(database_url=sqlite_url, replica_id="replica-a")
    clock = ManualClock(T0)
    scheduling = Scheduling([rollup, by_hand], config=config, clock=clock, workflows=starter)
    async with scheduling.run(app) as s:
        assert app.state.workflows is starter
        await clock.advance(30)

        async def both_done() -> bool:
            rows = (await runs_of(s, "dailyRollup")) + (await runs_of(s, "manual"))
            return len(rows) == 2 and all(r.status is RunStatus.SUCCEEDED for r in rows)

        await wait_until(both_done)
        (row,) = await runs_of(s, "dailyRollup")
    assert ("billing.dailyRollup", {"day": "2026-06-01", "run": row.id}) in starter.started
    assert ("billing.reindex", {"from": "handler"}) in starter.started
    assert seen[0].app is app and seen[0].workflows is starter


async def test_a_workflow_target_without_a_starter_fails_at_boot(sqlite_url: str) -> None:
    from fastapi_voltro_schedules import ConfigurationError, WorkflowTarget

    rollup = define_schedule(
        name="dailyRollup", cron="0 2 * * *", timezone="UTC",
        workflow=WorkflowTarget(name="billing.dailyRollup"),
    )
    with pytest.raises(ConfigurationError, match=r"no workflow starter is configured"):
        async with Scheduling([rollup], config=SchedulingConfig(database_url=sqlite_url)).run():
            pass


async def test_a_herd_records_each_run_by_its_own_outcome(sqlite_url: str) -> None:
    # Schedules due at one instant are admitted and run as one batch (bare tasks, bulk
    # terminal writes): each row must still end by its own handler — success, exception,
    # watchdog, and a sync handler in a thread — and one slow run must not hold the others.
    release = anyio.Event()

    @define_schedule(name="ok", cron="0 12 * * *", timezone="UTC")
    async def ok(ctx: ScheduleContext) -> None:
        return None

    @define_schedule(name="bad", cron="0 12 * * *", timezone="UTC")
    async def bad(ctx: ScheduleContext) -> None:
        raise RuntimeError("bad input row 7")

    @define_schedule(name="slow", cron="0 12 * * *", timezone="UTC", max_runtime_ms=5_000)
    async def slow(ctx: ScheduleContext) -> None:
        await release.wait()

    @define_schedule(name="sync", cron="0 12 * * *", timezone="UTC")
    def sync(ctx: ScheduleContext) -> None:
        return None

    clock = ManualClock(T0)
    async with running([ok, bad, slow, sync], sqlite_url, clock) as s:
        await clock.advance(30)

        async def others_done() -> bool:
            rows = [r for n in ("ok", "bad", "sync") for r in await runs_of(s, n)]
            return len(rows) == 3 and all(r.status.terminal for r in rows)

        await wait_until(others_done)
        (slow_row,) = await runs_of(s, "slow")
        assert slow_row.status is RunStatus.RUNNING
        await clock.advance(6)

        async def slow_done() -> bool:
            return (await runs_of(s, "slow"))[0].status.terminal

        await wait_until(slow_done)
        rows = {n: (await runs_of(s, n))[0] for n in ("ok", "bad", "slow", "sync")}
    assert rows["ok"].status is RunStatus.SUCCEEDED and rows["ok"].error_tag is None
    assert rows["sync"].status is RunStatus.SUCCEEDED
    assert rows["bad"].status is RunStatus.FAILED and rows["bad"].error_tag == "RuntimeError"
    assert rows["bad"].error_message == "bad input row 7"
    assert rows["slow"].status is RunStatus.FAILED and rows["slow"].error_tag == "timeout"
    assert {r.scheduled_at for r in rows.values()} == {minute(0)}
    assert all(r.finished_at is not None for r in rows.values())


async def test_an_unrecorded_outcome_is_logged_with_the_schedule(
    sqlite_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastapi_voltro_schedules.store import SQLStore

    async def unreachable(
        self: SQLStore, outcomes: Any, replica_id: str, *, announce: bool = False
    ) -> None:
        raise StoreUnavailableError("store finish_runs: connection refused")

    monkeypatch.setattr(SQLStore, "finish_runs", unreachable)
    ran = anyio.Event()

    @define_schedule(name="nightlyRollup", cron="0 12 * * *", timezone="UTC")
    async def rollup(ctx: ScheduleContext) -> None:
        ran.set()

    clock = ManualClock(T0)
    with caplog.at_level(logging.WARNING, logger="fastapi_voltro_schedules"):
        async with running([rollup], sqlite_url, clock) as s:
            await clock.advance(30)
            with anyio.fail_after(HANG):
                await ran.wait()

            async def warned() -> bool:
                return any("could not record the outcome" in r.message for r in caplog.records)

            await wait_until(warned)
            (row,) = await runs_of(s, "nightlyRollup")
    (line,) = [r.message for r in caplog.records if "could not record the outcome" in r.message]
    assert "name=nightlyRollup" in line and f"runId={row.id}" in line
    assert "status=succeeded" in line and "connection refused" in line
    assert row.status is RunStatus.RUNNING  # left for the reaper, not silently dropped
