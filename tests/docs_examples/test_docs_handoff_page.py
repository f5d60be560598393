# The examples of docs/handoff.md, verbatim (tests/test_docs.py checks the page quotes them).
# Each block between "# --- doc: NAME" and "# --- end" is one ```python block of the page.
# They run against the Redis of VOLTRO_TEST_REDIS_URL (the `redis_url` fixture).
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.slow]

# --- doc: arq
from datetime import UTC, datetime
from typing import Any

from fastapi_voltro_schedules import (
    RunStatus,
    ScheduleContext,
    WorkflowTarget,
    define_schedule,
)
from fastapi_voltro_schedules.handoff import Handoff, JobState
from fastapi_voltro_schedules.handoff.arq import ArqEngine
from fastapi_voltro_schedules.testing import run_once


# The worker side (run with `arq reports.WorkerSettings`): the job gets the payload.
async def rollup(ctx: dict[str, Any], payload: dict[str, Any]) -> None:
    ...  # the heavy work, on the worker


def rollup_input(ctx: ScheduleContext) -> dict[str, Any]:
    return {"day": ctx.scheduled_at.date().isoformat()}


# The app side: the schedule's firing becomes one arq job, its id the slot's.
nightly_rollup = define_schedule(
    name="nightlyRollup",
    cron="0 2 * * *",
    timezone="UTC",
    max_runtime_ms=3_600_000,  # covers the whole job, queue wait included
    workflow=WorkflowTarget(name="rollup", payload=rollup_input),
)


async def test_a_firing_becomes_one_arq_job(redis_url: str) -> None:
    engine = ArqEngine.from_url(redis_url)
    # follow=False: no worker runs here, so the run ends once the job is enqueued
    run = await run_once(
        nightly_rollup,
        at=datetime(2026, 3, 2, 2, 0, tzinfo=UTC),
        workflows=Handoff(engine, follow=False),
    )
    assert run.status is RunStatus.SUCCEEDED
    assert run.job_tracking == "handed-off"  # succeeded means "enqueued", and the row says so
    assert run.job_id is not None and run.job_id.startswith("nightlyRollup@2026-03-02T02:00:00Z")
    assert (await engine.report(run.job_id)).state is JobState.QUEUED
    # arq's own dedupe: a second enqueue of that id is refused while the job (or its
    # result) exists
    assert not await engine.enqueue(run.job_id, "rollup", {"day": "2026-03-02"})
    await engine.close()
# --- end
