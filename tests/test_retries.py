"""Retries within the slot (``RetryPolicy``, SPEC §7), on the manual clock: the backoff
arithmetic, one row per slot whatever its attempts, the window that closes at the next slot,
the overlap rules and pauses beside a pending retry, and the outcome hook."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from support.running import runs_of
from support.waiting import wait_until

from fastapi_voltro_schedules import (
    RecordedOutcome,
    RetryPolicy,
    RunStatus,
    Schedule,
    ScheduleContext,
    ScheduleDefinitionError,
    Scheduling,
    SchedulingConfig,
    define_schedule,
)
from fastapi_voltro_schedules.enums import Trigger
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.records import RunOutcome, RunRecord, new_run_id
from fastapi_voltro_schedules.retries import (
    RETRY_PAUSED,
    RETRY_WINDOW_CLOSED,
    RetryStart,
    plan_retry,
    plan_retry_start,
)
from fastapi_voltro_schedules.store import create_store
from fastapi_voltro_schedules.testing import (
    ManualClock,
    RealTimeLimitError,
    run_once,
    run_retries,
)

T0 = datetime(2026, 6, 1, 11, 59, 30, tzinfo=UTC)


@asynccontextmanager
async def running(
    schedules: list[Schedule],
    url: str,
    clock: ManualClock,
    on_outcome: Any = None,
    **config: Any,
) -> AsyncIterator[Scheduling]:
    cfg = SchedulingConfig(database_url=url, replica_id="replica-a", **config)
    scheduling = Scheduling(schedules, config=cfg, clock=clock, on_outcome=on_outcome)
    async with scheduling.run():
        yield scheduling


def minute(n: int, second: float = 0) -> datetime:
    return datetime(2026, 6, 1, 12, n, tzinfo=UTC) + timedelta(seconds=second)


# -- the policy and its arithmetic (pure) ------------------------------------------------


@pytest.mark.parametrize(
    ("backoff_ms", "max_backoff_ms", "retry", "wait_ms"),
    [
        (1000, 60_000, 1, 1000),
        (1000, 60_000, 2, 2000),
        (1000, 60_000, 3, 4000),
        (1000, 60_000, 7, 60_000),  # 64 s capped at 60 s
        (1000, 5000, 4, 5000),
        (5000, 1000, 1, 1000),  # a cap below the first wait is every wait
        (0, 0, 5, 0),
        (250, 600_000_000, 80, 600_000_000),  # a huge exponent is capped, not computed
    ],
)
def test_backoff_doubles_from_the_first_wait_up_to_the_cap(
    backoff_ms: int, max_backoff_ms: int, retry: int, wait_ms: int
) -> None:
    policy = RetryPolicy(attempts=100, backoff_ms=backoff_ms, max_backoff_ms=max_backoff_ms)
    assert policy.backoff(retry) == timedelta(milliseconds=wait_ms)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"attempts": 0}, "attempts"),
        ({"attempts": True}, "attempts"),
        ({"attempts": 2.5}, "attempts"),
        ({"attempts": 101}, "attempts"),
        ({"attempts": 3, "backoff_ms": -1}, "backoff_ms"),
        ({"attempts": 3, "backoff_ms": "1s"}, "backoff_ms"),
        ({"attempts": 3, "max_backoff_ms": -5}, "max_backoff_ms"),
        ({"attempts": 3, "max_backoff_ms": 604_800_001}, "max_backoff_ms"),
    ],
)
def test_a_bad_policy_is_refused_naming_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ScheduleDefinitionError, match=rf"^RetryPolicy: {field}="):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_define_schedule_refuses_a_retry_that_is_not_a_policy() -> None:
    with pytest.raises(ScheduleDefinitionError, match=r'define_schedule\("x"\): retry=3'):
        define_schedule(
            name="x",
            cron="* * * * *",
            timezone="UTC",
            handler=_noop,
            retry=3,  # type: ignore[arg-type]
        )


async def _noop(ctx: ScheduleContext) -> None:
    return None


def test_plan_retry_counts_attempts_and_closes_at_the_next_slot() -> None:
    policy = RetryPolicy(attempts=3, backoff_ms=10_000, max_backoff_ms=60_000)
    failed = minute(0, 5)
    window = minute(1)
    # attempt 1 failed: retry 10 s later; attempt 2: 20 s later
    assert plan_retry(policy, 1, failed, window).retry_at == minute(0, 15)
    assert plan_retry(policy, 2, failed, window).retry_at == minute(0, 25)
    # attempt 3 was the last: final, with the error's own tag
    assert plan_retry(policy, 3, failed, window) == plan_retry(None, 1, failed, window)
    assert plan_retry(policy, 3, failed, window).tag is None
    # a wait that would end at (or after) the next slot: final, tagged
    late = plan_retry(policy, 2, minute(0, 40), window)
    assert late.retry_at is None and late.tag == RETRY_WINDOW_CLOSED
    assert "attempt 3 of 3" in late.why
    assert plan_retry(policy, 1, minute(0, 50), window).tag == RETRY_WINDOW_CLOSED
    assert plan_retry(policy, 1, minute(0, 49), window).retry_at == minute(0, 59)


def test_plan_retry_start() -> None:
    policy = RetryPolicy(attempts=3)
    assert plan_retry_start(policy, minute(0, 10), minute(1), paused=False)[0] is RetryStart.START
    what, tag, _ = plan_retry_start(policy, minute(0, 10), minute(1), paused=True)
    assert (what, tag) == (RetryStart.CLOSE, RETRY_PAUSED)
    what, tag, _ = plan_retry_start(policy, minute(1), minute(1), paused=False)
    assert (what, tag) == (RetryStart.CLOSE, RETRY_WINDOW_CLOSED)


# -- a scheduler on the manual clock -------------------------------------------------------


def flaky(name: str, failures: int, calls: list[tuple[datetime, int]], **kwargs: object):
    """A schedule every minute whose handler fails its first ``failures`` calls."""

    async def handler(ctx: ScheduleContext) -> None:
        calls.append((ctx.scheduled_at, len(calls) + 1))
        if len(calls) <= failures:
            raise ConnectionError(f"upstream down (call {len(calls)})")

    return define_schedule(
        name=name,
        cron="* * * * *",
        timezone="UTC",
        handler=handler,
        **kwargs,  # type: ignore[arg-type]
    )


async def test_fails_twice_then_succeeds_one_row_three_attempts(sqlite_url: str) -> None:
    calls: list[tuple[datetime, int]] = []
    outcomes: list[RecordedOutcome] = []
    schedule = flaky("flaky", 2, calls, retry=RetryPolicy(attempts=3, backoff_ms=5000))
    clock = ManualClock(T0)
    async with running([schedule], sqlite_url, clock, on_outcome=outcomes.append) as s:
        await clock.advance(30)  # 12:00:00 fires; attempt 1 fails

        async def pending(attempt: int) -> bool:
            rows = await runs_of(s, "flaky")
            return bool(rows) and rows[0].attempt == attempt and rows[0].retry_at is not None

        await wait_until(lambda: pending(1), what="attempt 1 failed, retry pending")
        (row,) = await runs_of(s, "flaky")
        assert row.status is RunStatus.RUNNING
        assert row.retry_at == minute(0, 5)
        assert row.error_tag == "ConnectionError"
        await clock.advance(4.9)
        assert len(calls) == 1  # not before its backoff
        await clock.advance(0.1)
        await wait_until(lambda: pending(2), what="attempt 2 failed, retry pending")
        (row,) = await runs_of(s, "flaky")
        assert row.retry_at == minute(0, 15)  # 5 s, then 10 s
        await clock.advance(10)

        async def final() -> bool:
            rows = await runs_of(s, "flaky")
            return bool(rows) and rows[0].status.terminal

        await wait_until(final, what="the slot's final outcome")
        await wait_until(lambda: outcomes, what="the hook")
        rows = await runs_of(s, "flaky")
    assert len(rows) == 1
    (row,) = rows
    assert row.status is RunStatus.SUCCEEDED and row.attempt == 3 and row.retry_at is None
    assert row.error_tag is None
    assert [c[0] for c in calls] == [minute(0)] * 3
    assert len(outcomes) == 1
    assert outcomes[0].status is RunStatus.SUCCEEDED and outcomes[0].attempts == 3


async def _rows_when(s: Scheduling, name: str, check: Any, what: str) -> list[Any]:
    async def look() -> list[Any] | None:
        rows = await runs_of(s, name)
        return rows if check(rows) else None

    found: list[Any] = await wait_until(look, what=what)
    return found


async def test_a_failure_still_failing_at_the_next_slot_is_final_before_it(
    sqlite_url: str,
) -> None:
    calls: list[tuple[datetime, int]] = []
    # 50 s backoff: attempt 2 (12:00:50) fails, and attempt 3 would wait 100 s — past 12:01
    schedule = flaky("late", 2, calls, retry=RetryPolicy(attempts=3, backoff_ms=50_000))
    clock = ManualClock(T0)
    async with running([schedule], sqlite_url, clock) as s:
        await clock.advance(30)
        await _rows_when(s, "late", lambda r: r and r[0].retry_at, "attempt 1 pending")
        await clock.advance(50)  # 12:00:50: attempt 2 starts, fails
        rows = await _rows_when(s, "late", lambda r: r and r[0].status.terminal, "final")
        # final before the next slot: the clock is still at 12:00:50
        assert clock.now() == minute(0, 50)
        (row,) = rows
        assert row.status is RunStatus.FAILED and row.attempt == 2
        assert row.error_tag == RETRY_WINDOW_CLOSED
        assert row.error_message is not None
        assert row.error_message.startswith("ConnectionError: upstream down (call 2)")
        assert "next slot" in row.error_message
        await clock.advance(10)  # 12:01: the next slot is a run of its own
        rows = await _rows_when(s, "late", lambda r: len(r) == 2 and r[1].status.terminal, "next")
    assert [(r.scheduled_at, r.status, r.attempt) for r in rows] == [
        (minute(0), RunStatus.FAILED, 2),
        (minute(1), RunStatus.SUCCEEDED, 1),
    ]
    assert [c[0] for c in calls] == [minute(0), minute(0), minute(1)]


async def test_attempts_exhausted_keep_the_errors_own_tag(sqlite_url: str) -> None:
    calls: list[tuple[datetime, int]] = []
    schedule = flaky("always", 99, calls, retry=RetryPolicy(attempts=2, backoff_ms=1000))
    clock = ManualClock(T0)
    async with running([schedule], sqlite_url, clock) as s:
        await clock.advance(30)
        await _rows_when(s, "always", lambda r: r and r[0].retry_at, "attempt 1 pending")
        await clock.advance(1)
        (row,) = await _rows_when(s, "always", lambda r: r and r[0].status.terminal, "final")
    assert (row.status, row.attempt, row.error_tag) == (RunStatus.FAILED, 2, "ConnectionError")
    assert row.error_message == "upstream down (call 2)"
    assert len(calls) == 2


async def test_a_pause_ends_a_pending_retry_and_resume_replays_nothing(sqlite_url: str) -> None:
    """Decided: a pause stops retries. A retry that comes due while its schedule is paused
    does not start; the slot's last failure is final (``retry-paused``), and resuming replays
    nothing — as for every other firing a pause held."""
    calls: list[tuple[datetime, int]] = []
    outcomes: list[RecordedOutcome] = []
    schedule = flaky("paused", 1, calls, retry=RetryPolicy(attempts=3, backoff_ms=5000))
    clock = ManualClock(T0)
    async with running([schedule], sqlite_url, clock, on_outcome=outcomes.append) as s:
        await clock.advance(30)
        await _rows_when(s, "paused", lambda r: r and r[0].retry_at, "attempt 1 pending")
        await s.pause("paused", by="operator", reason="maintenance")
        await clock.advance(5)
        (row,) = await _rows_when(s, "paused", lambda r: r and r[0].status.terminal, "final")
        assert (row.status, row.attempt, row.error_tag) == (RunStatus.FAILED, 1, RETRY_PAUSED)
        assert row.error_message is not None and row.error_message.startswith("ConnectionError")
        await s.resume("paused", by="operator")
        await clock.advance(25)  # 12:00:30: no attempt is replayed
        await wait_until(lambda: outcomes, what="the hook")
        assert len(calls) == 1
        assert len(await runs_of(s, "paused")) == 1
    assert [(o.status, o.attempts, o.error_tag) for o in outcomes] == [
        (RunStatus.FAILED, 1, RETRY_PAUSED)
    ]


@pytest.mark.parametrize("overlap", ["skip", "queue"])
async def test_a_pending_retry_holds_its_schedule_like_the_attempt_it_follows(
    sqlite_url: str, overlap: str
) -> None:
    """Decided: between two attempts the slot's row stays ``running`` and holds its schedule
    for the overlap rules. By the window rule a retry always *starts* before the next slot, so
    the next slot only meets an attempt still running: ``skip`` records it skipped, ``queue``
    runs it once the slot's last attempt ends (here final: its window closed)."""
    import anyio

    release = anyio.Event()
    calls: list[datetime] = []

    async def handler(ctx: ScheduleContext) -> None:
        calls.append(ctx.scheduled_at)
        if len(calls) == 2:
            await release.wait()  # attempt 2 runs past the next slot
        if len(calls) <= 2:
            raise ConnectionError(f"call {len(calls)}")

    schedule = define_schedule(
        name="held",
        cron="* * * * *",
        timezone="UTC",
        handler=handler,
        on_overlap=overlap,
        retry=RetryPolicy(attempts=3, backoff_ms=5000),
    )
    clock = ManualClock(T0)
    async with running([schedule], sqlite_url, clock) as s:
        await clock.advance(30)
        await _rows_when(s, "held", lambda r: r and r[0].retry_at, "attempt 1 pending")
        await clock.advance(5)  # attempt 2 starts and blocks
        await wait_until(lambda: len(calls) == 2, what="attempt 2 running")
        await clock.advance(55)  # 12:01: the next slot meets attempt 2
        if overlap == "skip":
            rows = await _rows_when(s, "held", lambda r: len(r) == 2, "the next slot's row")
            assert rows[1].status is RunStatus.SKIPPED
        else:
            assert s.engine is not None
            await wait_until(lambda: s.engine.waiting_here(), what="the next slot queued")
        assert calls == [minute(0), minute(0)]
        release.set()
        rows = await _rows_when(
            s, "held", lambda r: len(r) == 2 and all(x.status.terminal for x in r), "settled"
        )
    first, second = rows
    assert (first.status, first.attempt, first.error_tag) == (
        RunStatus.FAILED,
        2,
        RETRY_WINDOW_CLOSED,
    )
    if overlap == "skip":
        assert second.status is RunStatus.SKIPPED
        assert calls == [minute(0), minute(0)]
    else:
        assert (second.status, second.attempt) == (RunStatus.SUCCEEDED, 1)
        assert calls == [minute(0), minute(0), minute(1)]


async def test_a_timeout_is_retried_like_an_exception(sqlite_url: str) -> None:
    import anyio

    calls: list[int] = []

    async def hangs_once(ctx: ScheduleContext) -> None:
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            await anyio.sleep_forever()  # cut off by the watchdog (max_runtime_ms)

    schedule = define_schedule(
        name="hangs",
        cron="* * * * *",
        timezone="UTC",
        handler=hangs_once,
        max_runtime_ms=2000,
        retry=RetryPolicy(attempts=2, backoff_ms=3000),
    )
    clock = ManualClock(T0)
    async with running([schedule], sqlite_url, clock) as s:
        await clock.advance(30)
        await wait_until(lambda: calls == [1], what="attempt 1 running")
        await clock.advance(2)  # past max_runtime_ms: cancelled, failed/timeout — retried
        (row,) = await _rows_when(s, "hangs", lambda r: r and r[0].retry_at, "retry pending")
        assert (row.error_tag, row.retry_at) == ("timeout", minute(0, 5))
        await clock.advance(3)
        (row,) = await _rows_when(s, "hangs", lambda r: r and r[0].status.terminal, "final")
    assert (row.status, row.attempt, calls) == (RunStatus.SUCCEEDED, 2, [1, 2])


# -- the testing helper --------------------------------------------------------------------


async def test_run_retries_moves_the_manual_clock_through_each_backoff() -> None:
    calls: list[tuple[datetime, int]] = []
    schedule = flaky("helper", 2, calls, retry=RetryPolicy(attempts=3, backoff_ms=1000))
    ran = await run_retries(schedule, at=minute(0))
    assert (ran.run.status, ran.run.attempt) == (RunStatus.SUCCEEDED, 3)
    assert ran.started == [minute(0), minute(0, 1), minute(0, 3)]
    assert ran.waits == [timedelta(seconds=1), timedelta(seconds=2)]
    assert [c[0] for c in calls] == [minute(0)] * 3
    # run_once runs every attempt too (the slot's final row), instead of waiting for a clock
    # nobody moves
    calls.clear()
    row = await run_once(schedule, at=minute(0))
    assert (row.status, row.attempt, len(calls)) == (RunStatus.SUCCEEDED, 3, 3)


async def test_run_retries_shows_the_window_closing() -> None:
    calls: list[tuple[datetime, int]] = []
    schedule = flaky("window", 99, calls, retry=RetryPolicy(attempts=5, backoff_ms=40_000))
    ran = await run_retries(schedule, at=minute(0))
    assert (ran.run.status, ran.run.attempt) == (RunStatus.FAILED, 2)
    assert ran.run.error_tag == RETRY_WINDOW_CLOSED
    assert ran.started == [minute(0), minute(0, 40)]


async def test_the_helpers_name_their_real_time_limit() -> None:
    import anyio

    async def stuck(ctx: ScheduleContext) -> None:
        await anyio.sleep(3600)  # real time: the manual clock does not end it

    schedule = define_schedule(
        name="stuck", cron="* * * * *", timezone="UTC", handler=stuck, retry=RetryPolicy(2)
    )
    with pytest.raises(RealTimeLimitError, match=r"run_retries\(\"stuck\"\).* 0.2 s") as info:
        await run_retries(schedule, at=minute(0), timeout=0.2)
    assert info.value.limit == 0.2 and isinstance(info.value, TimeoutError)


# -- every store: the pending retry's writes, and one taker of a stopped replica's retry ----


async def test_every_store_retries_within_the_slot(database_url: str) -> None:
    await upgrade_to_head(database_url)
    calls: list[tuple[datetime, int]] = []
    schedule = flaky("stores", 1, calls, retry=RetryPolicy(attempts=3, backoff_ms=2000))
    clock = ManualClock(T0)
    async with running([schedule], database_url, clock) as s:
        await clock.advance(30)
        (row,) = await _rows_when(s, "stores", lambda r: r and r[0].retry_at, "pending")
        assert (row.status, row.attempt, row.retry_at) == (RunStatus.RUNNING, 1, minute(0, 2))
        await clock.advance(2)
        (row,) = await _rows_when(s, "stores", lambda r: r and r[0].status.terminal, "final")
    assert (row.status, row.attempt, row.retry_at, len(calls)) == (
        RunStatus.SUCCEEDED,
        2,
        None,
        2,
    )


async def left_pending(url: str, name: str, slot: datetime, trigger: Trigger) -> None:
    """What a replica ("gone") that stopped leaves: ``name``'s ``slot`` failed its attempt 1 at
    slot + 1 s, a retry pending at slot + 6 s, the row beaten last at slot + 1 s."""
    store = create_store(url)
    try:
        await store.insert_runs(
            [
                RunRecord(
                    id=new_run_id(), name=name, scheduled_at=slot, status=RunStatus.RUNNING,
                    trigger=trigger, fired_at=slot, heartbeat_at=slot + timedelta(seconds=1),
                    replica_id="gone", error_tag="ConnectionError", error_message="down",
                )
            ]
        )  # fmt: skip
        (orphan,) = await store.list_runs(name)
        assert await store.defer_run(
            RunOutcome(
                run_id=orphan.id,
                status=RunStatus.FAILED,
                finished_at=slot + timedelta(seconds=1),
                error_tag="ConnectionError",
                error_message="down",
                retry_at=slot + timedelta(seconds=6),
            ),
            "gone",
        )
    finally:
        await store.dispose()


@pytest.mark.postgres
async def test_two_replicas_racing_for_a_stopped_replicas_retry_run_it_once(
    postgres_url: str,
) -> None:
    """A ``running`` row with a retry pending whose replica stopped beating: two live replicas
    look at once; exactly one takes it over (a compare-and-set on the beat judged silent) and
    runs attempt 2, once."""
    import anyio

    await upgrade_to_head(postgres_url)
    calls: list[int] = []

    async def handler(ctx: ScheduleContext) -> None:
        calls.append(ctx.attempt)

    def hourly() -> Schedule:
        return define_schedule(
            name="orphan",
            cron="0 * * * *",
            timezone="UTC",
            handler=handler,
            retry=RetryPolicy(attempts=3, backoff_ms=5000),
        )

    slot = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    await left_pending(postgres_url, "orphan", slot, Trigger.SELF)
    # silent for 29 s, past 3 beats of 1 s: dead; the window is open until 13:00
    at = slot + timedelta(seconds=30)
    clocks = [ManualClock(at), ManualClock(at)]
    configs = [
        SchedulingConfig(
            database_url=postgres_url, replica_id=f"live-{i}", schedule_heartbeat_ms=1000
        )
        for i in range(2)
    ]
    a = Scheduling([hourly()], config=configs[0], clock=clocks[0])
    b = Scheduling([hourly()], config=configs[1], clock=clocks[1])
    async with a.run(), b.run():
        assert a.engine is not None and b.engine is not None

        async def look(s: Scheduling) -> None:  # what the corpse loop does every 3 beats
            assert s.engine is not None
            await s.engine.maintenance.reap()
            await s.engine.resume_retries()

        async with anyio.create_task_group() as tg:
            tg.start_soon(look, a)
            tg.start_soon(look, b)
        (row,) = await _rows_when(a, "orphan", lambda r: r and r[0].status.terminal, "final")
    assert (row.status, row.attempt) == (RunStatus.SUCCEEDED, 2)
    assert row.replica_id in ("live-0", "live-1")
    assert calls == [2]


@pytest.mark.postgres
async def test_an_external_schedules_retry_left_pending_by_a_stopped_replica_is_taken_over(
    postgres_url: str,
) -> None:
    """An ``external`` schedule is armed nowhere (its arrivals come through the trigger route
    on any replica), yet a retry its stopped replica left pending is the fleet's to carry on:
    a live replica takes it over and runs attempt 2 — once, the row ending ``succeeded``.
    (It was marked ``failed/abandoned`` as if no replica knew the schedule.)"""
    await upgrade_to_head(postgres_url)
    calls: list[int] = []

    async def handler(ctx: ScheduleContext) -> None:
        calls.append(ctx.attempt)

    nightly = define_schedule(
        name="export",
        cron="0 2 * * *",
        timezone="UTC",
        trigger="external",
        handler=handler,
        retry=RetryPolicy(attempts=3, backoff_ms=5000),
    )
    slot = datetime(2026, 6, 1, 2, 0, tzinfo=UTC)
    await left_pending(postgres_url, "export", slot, Trigger.EXTERNAL)
    clock = ManualClock(slot + timedelta(seconds=30))  # silent past 3 beats of 1 s: dead
    config = SchedulingConfig(
        database_url=postgres_url, replica_id="live", schedule_heartbeat_ms=1000
    )
    live = Scheduling([nightly], config=config, clock=clock)
    async with live.run():
        # the boot's look at the ledger takes it over (the corpse loop's, every 3 beats after)
        (row,) = await _rows_when(live, "export", lambda r: r and r[0].status.terminal, "final")
    assert (row.status, row.attempt, row.replica_id) == (RunStatus.SUCCEEDED, 2, "live")
    assert calls == [2]
