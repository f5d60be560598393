"""The job a hand-off test's firings become, and the arq worker that runs it:
``arq apps.handoff_worker.WorkerSettings`` (``tests/`` on the path).

Environment: ``HANDOFF_REDIS_URL``, ``HANDOFF_QUEUE`` (where the jobs are), ``HANDOFF_MARKERS``
(a directory). Each execution of ``handoff_job`` creates one file there first thing —
``<job id with / and : replaced>__<uuid>`` — so executions are counted from the job's own
side effects, not from any ledger; while a file ``hold`` exists there the job waits (bounded),
so a test can kill a replica while the job is known to be in flight. A payload with ``fail``
raises ``RuntimeError("report for <slot> broke")``.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import anyio
from arq.connections import RedisSettings

HOLD_BOUND_S = 60.0


def marker_name(job_id: str) -> str:
    return job_id.replace("/", "_").replace(":", "-")


async def handoff_job(ctx: dict[str, Any], payload: dict[str, Any]) -> str:
    markers = Path(os.environ["HANDOFF_MARKERS"])
    (markers / f"{marker_name(ctx['job_id'])}__{uuid.uuid4().hex}").touch(exist_ok=False)
    with anyio.move_on_after(HOLD_BOUND_S):  # a bound for a test that died holding
        while (markers / "hold").exists():
            await anyio.sleep(0.02)
    if payload.get("fail"):
        raise RuntimeError(f"report for {payload['slot']} broke")
    return f"report for {payload['slot']} done"


class WorkerSettings:
    functions = [handoff_job]  # noqa: RUF012 - arq reads a class attribute
    redis_settings = RedisSettings.from_dsn(os.environ.get("HANDOFF_REDIS_URL", "redis://"))
    queue_name = os.environ.get("HANDOFF_QUEUE", "arq:queue")
    poll_delay = 0.05
    max_tries = 1  # a job that raises is failed, not re-run (arq re-runs only on Retry anyway)
    handle_signals = True
