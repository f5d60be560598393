"""The hand-off tests' procrastinate side: the ``App`` both the replicas (deferring) and the
worker (``procrastinate --app apps.handoff_procrastinate.app worker``, ``tests/`` on the path)
use, on the ledger's own Postgres (``HANDOFF_PROCRASTINATE_DSN``: a libpq URL of the same
database as ``VOLTRO_DATABASE_URL``).

``handoff_job`` does what ``apps.handoff_worker``'s arq job does (markers in
``HANDOFF_MARKERS``, named by the job's queueing lock — the slot's key —, the ``hold`` file, a
``fail`` payload raising).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import anyio
import procrastinate
from apps.handoff_worker import HOLD_BOUND_S, marker_name

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(
        conninfo=os.environ.get("HANDOFF_PROCRASTINATE_DSN", ""), min_size=1, max_size=4
    )
)


@app.task(name="handoff_job", pass_context=True)
async def handoff_job(context: procrastinate.JobContext, payload: dict[str, Any]) -> str:
    assert context.job.queueing_lock is not None
    markers = Path(os.environ["HANDOFF_MARKERS"])
    (markers / f"{marker_name(context.job.queueing_lock)}__{uuid.uuid4().hex}").touch()
    with anyio.move_on_after(HOLD_BOUND_S):  # a bound for a test that died holding
        while (markers / "hold").exists():
            await anyio.sleep(0.02)
    if payload.get("fail"):
        raise RuntimeError(f"report for {payload['slot']} broke")
    return f"report for {payload['slot']} done"
