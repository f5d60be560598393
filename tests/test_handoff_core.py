"""The hand-off core (issue 34) in one process, with a real arq worker on Redis: what happens
between the claim and the enqueue, and what the row says after.

- the job id is the slot's (``job_id_for``: a table);
- a replica that died after writing the job onto its row but before the enqueue leaves a
  silent row: the next replica to boot takes it over and enqueues that job — once;
- the watchdog's ``max_runtime_ms`` covers the whole job: a job still running at the deadline
  ends the row ``failed/timeout``;
- without following (``follow=False``), ``succeeded`` means "handed off" and the row says so;
- one firing hands off one job; a bad ``poll_interval`` names the field.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from support.handoff import executions, marker_name, worker_process
from support.waiting import wait_until

from fastapi_voltro_schedules import (
    ConfigurationError,
    Handoff,
    HandoffError,
    RetryPolicy,
    RunStatus,
    Schedule,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    Trigger,
    WorkflowTarget,
    define_schedule,
)
from fastapi_voltro_schedules.api.inspect_models import InspectRunView
from fastapi_voltro_schedules.enums import CoordinationOutcome
from fastapi_voltro_schedules.handoff import job_id_for
from fastapi_voltro_schedules.handoff.arq import ArqEngine
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.store import RunRecord, create_store, new_run_id
from fastapi_voltro_schedules.testing import ManualClock

pytestmark = [pytest.mark.slow]

T0 = datetime(2026, 3, 4, 8, 30, 30, tzinfo=UTC)
SLOT = datetime(2026, 3, 4, 8, 31, tzinfo=UTC)
SLOT_ID = "report@2026-03-04T08:31:00Z"
QUEUE = "voltro-test:handoff-core"


@pytest.mark.parametrize(
    ("name", "at", "kw", "expected"),
    [
        ("report", SLOT, {}, "report@2026-03-04T08:31:00Z"),
        # a zone-aware slot is spelled in UTC: every replica derives the same id
        (
            "report",
            datetime.fromisoformat("2026-03-04T09:31:00+01:00"),
            {},
            "report@2026-03-04T08:31:00Z",
        ),
        ("report", SLOT, {"attempt": 3}, "report@2026-03-04T08:31:00Z#3"),
        ("report", SLOT, {"trigger": Trigger.EXTERNAL, "run_id": "sr_1"}, SLOT_ID),
        # a manual firing (Run now, a re-run) names its run: not the slot's first job
        ("report", SLOT, {"trigger": Trigger.MANUAL, "run_id": "sr_1"}, f"{SLOT_ID}/sr_1"),
    ],
)  # fmt: skip
def test_the_job_id_is_the_slot(name: str, at: datetime, kw: dict[str, Any], expected: str) -> None:
    assert job_id_for(name, at, **kw) == expected


def test_a_poll_interval_that_is_not_positive_names_the_field() -> None:
    with pytest.raises(ConfigurationError, match=r"poll_interval=0.*positive"):
        Handoff(ArqEngine.from_url("redis://127.0.0.1:6379/5"), poll_interval=0)


@contextmanager
def _worker(redis_url: str, markers: Path, tmp_path: Path) -> Iterator[None]:
    env = {"HANDOFF_REDIS_URL": redis_url, "HANDOFF_QUEUE": QUEUE, "HANDOFF_MARKERS": str(markers)}
    command = [sys.executable, "-m", "arq", "apps.handoff_worker.WorkerSettings"]
    with worker_process(command, env, tmp_path / "worker.log") as process:
        yield
        assert process.poll() is None, (tmp_path / "worker.log").read_text()


def _report(**kw: Any) -> Schedule:
    return define_schedule(
        name="report",
        cron="0 * * * * *",  # every minute at :00 (the clock starts at :30)
        timezone="UTC",
        workflow=WorkflowTarget(
            name="handoff_job", payload=lambda ctx: {"slot": ctx.scheduled_at.isoformat()}
        ),
        **kw,
    )


@asynccontextmanager
async def _running(
    url: str, redis_url: str, schedules: list[Schedule], clock: ManualClock, **handoff: Any
) -> AsyncIterator[tuple[Scheduling, ArqEngine]]:
    engine = ArqEngine.from_url(redis_url, queue_name=QUEUE)
    config = SchedulingConfig(database_url=url, replica_id="pod-2", schedule_heartbeat_ms=500)
    workflows = Handoff(engine, poll_interval=0.02, **handoff)
    scheduling = Scheduling(schedules, config=config, clock=clock, workflows=workflows)
    try:
        async with scheduling.run():
            yield scheduling, engine
    finally:
        await engine.close()


async def _row(url: str) -> RunRecord | None:
    store = create_store(url)
    try:
        rows = await store.list_runs("report", limit=10)
    finally:
        await store.dispose()
    assert len(rows) <= 1, rows
    return rows[0] if rows else None


async def _final(url: str) -> RunRecord | None:
    row = await _row(url)
    return row if row is not None and row.status.terminal else None


async def test_a_row_left_between_its_job_write_and_the_enqueue_is_enqueued_once_on_takeover(
    sqlite_url: str, redis_url: str, tmp_path: Path
) -> None:
    await upgrade_to_head(sqlite_url)
    job_id = job_id_for("report", SLOT)
    # what a replica killed right after writing its job onto the row leaves: a running row,
    # silent since, naming a job the engine never got
    store = create_store(sqlite_url)
    try:
        dead = RunRecord(
            id=new_run_id(),
            name="report",
            scheduled_at=SLOT,
            status=RunStatus.RUNNING,
            trigger=Trigger.SELF,
            coordination_outcome=CoordinationOutcome.SINGLE,
            fired_at=SLOT,
            replica_id="pod-1",
            heartbeat_at=SLOT,
        )
        await store.insert_run(dead)
        assert await store.update_run(
            dead.id, expect_status=RunStatus.RUNNING, job_id=job_id, job_tracking="followed"
        )
    finally:
        await store.dispose()
    markers = tmp_path / "markers"
    markers.mkdir()
    clock = ManualClock(SLOT + timedelta(seconds=10))
    with _worker(redis_url, markers, tmp_path):
        async with _running(sqlite_url, redis_url, [_report()], clock):
            row = await wait_until(lambda: _final(sqlite_url), what="the silent row taken over")
    assert (row.id, row.status, row.replica_id) == (dead.id, RunStatus.SUCCEEDED, "pod-2")
    assert row.job_id == job_id
    shown = InspectRunView.of(row).model_dump(by_alias=True)  # what the inspect API answers
    assert (shown["jobId"], shown["jobTracking"]) == (job_id, "followed")
    assert executions(markers) == {marker_name(job_id): 1}


async def test_the_watchdog_covers_the_whole_job(
    sqlite_url: str, redis_url: str, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    (markers / "hold").touch()  # the job starts and does not end
    clock = ManualClock(T0)
    with _worker(redis_url, markers, tmp_path):
        async with _running(sqlite_url, redis_url, [_report(max_runtime_ms=5000)], clock):
            await clock.advance(30)  # 08:31:00 fires: the job is enqueued and followed
            job_id = job_id_for("report", SLOT)
            await wait_until(lambda: marker_name(job_id) in executions(markers), what="job ran")
            running = await _row(sqlite_url)
            assert running is not None and running.status is RunStatus.RUNNING
            await clock.advance(6)  # past max_runtime_ms, the job still running on the worker
            row = await wait_until(lambda: _final(sqlite_url), what="the run timed out")
        (markers / "hold").unlink()
    assert (row.status, row.error_tag) == (RunStatus.FAILED, "timeout"), row
    assert row.job_id == job_id and row.job_tracking == "followed"


async def test_without_following_succeeded_means_handed_off(
    sqlite_url: str, redis_url: str, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    (markers / "hold").touch()
    clock = ManualClock(T0)
    with _worker(redis_url, markers, tmp_path):
        async with _running(sqlite_url, redis_url, [_report()], clock, follow=False):
            await clock.advance(30)
            row = await wait_until(lambda: _final(sqlite_url), what="the run handed off")
            # the job has not ended (it is held): the row's success is the enqueue's
            job_id = job_id_for("report", SLOT)
            await wait_until(lambda: marker_name(job_id) in executions(markers), what="job ran")
        (markers / "hold").unlink()
    assert (row.status, row.job_tracking, row.job_id) == (RunStatus.SUCCEEDED, "handed-off", job_id)


async def test_one_firing_hands_off_one_job(
    sqlite_url: str, redis_url: str, tmp_path: Path
) -> None:
    seen: list[BaseException] = []

    async def fan_out(ctx: ScheduleContext) -> None:
        assert ctx.workflows is not None
        await ctx.workflows.start("handoff_job", {"slot": "a"})
        try:
            await ctx.workflows.start("handoff_job", {"slot": "b"})
        except HandoffError as exc:
            seen.append(exc)
            raise

    schedule = define_schedule(name="report", cron="0 * * * * *", timezone="UTC", handler=fan_out)
    markers = tmp_path / "markers"
    markers.mkdir()
    clock = ManualClock(T0)
    with _worker(redis_url, markers, tmp_path):
        async with _running(sqlite_url, redis_url, [schedule], clock):
            await clock.advance(30)
            row = await wait_until(lambda: _final(sqlite_url), what="the run ended")
    assert row.status is RunStatus.FAILED and row.error_tag == "HandoffError", row
    (error,) = seen
    assert "one firing hands off one job" in str(error)
    assert executions(markers) == {marker_name(job_id_for("report", SLOT)): 1}


async def test_a_retried_hand_off_is_a_job_of_its_own(
    sqlite_url: str, redis_url: str, tmp_path: Path
) -> None:
    # attempt 1's job fails; the RetryPolicy's attempt 2 is a new job (…#2) that succeeds
    schedule = define_schedule(
        name="report",
        cron="0 * * * * *",
        timezone="UTC",
        retry=RetryPolicy(attempts=2, backoff_ms=1000),
        workflow=WorkflowTarget(
            name="handoff_job",
            payload=lambda ctx: {"slot": ctx.scheduled_at.isoformat(), "fail": ctx.attempt == 1},
        ),
    )
    markers = tmp_path / "markers"
    markers.mkdir()
    clock = ManualClock(T0)
    with _worker(redis_url, markers, tmp_path):
        async with _running(sqlite_url, redis_url, [schedule], clock):
            await clock.advance(30)

            async def pending() -> RunRecord | None:
                row = await _row(sqlite_url)
                return row if row is not None and row.retry_at is not None else None

            waiting = await wait_until(pending, what="attempt 1's job failed, a retry pending")
            assert waiting.error_tag == "JobFailedError" and waiting.job_id == SLOT_ID
            await clock.advance(2)
            row = await wait_until(lambda: _final(sqlite_url), what="attempt 2 final")
    assert (row.status, row.attempt, row.job_id) == (RunStatus.SUCCEEDED, 2, f"{SLOT_ID}#2")
    assert executions(markers) == {marker_name(SLOT_ID): 1, marker_name(f"{SLOT_ID}#2"): 1}
