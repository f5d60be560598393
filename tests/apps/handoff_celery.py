"""The hand-off tests' Celery side: the app both the replicas (sending) and the worker
(``celery -A apps.handoff_celery worker``, ``tests/`` on the path) use — Redis broker and
result backend at ``HANDOFF_REDIS_URL``, default queue ``HANDOFF_QUEUE``.

``handoff_job`` does what ``apps.handoff_worker``'s arq job does (markers in
``HANDOFF_MARKERS`` named by the task id, the ``hold`` file, a ``fail`` payload raising), on
:class:`~fastapi_voltro_schedules.handoff.celery.OncePerJob`: a duplicate message of a task id
that already ran is dropped on the worker.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

from apps.handoff_worker import HOLD_BOUND_S, marker_name
from celery import Celery

from fastapi_voltro_schedules.handoff.celery import OncePerJob

_REDIS = os.environ.get("HANDOFF_REDIS_URL", "redis://127.0.0.1:6379/5")
app = Celery("voltro-handoff-test", broker=_REDIS, backend=_REDIS)
app.conf.update(
    task_default_queue=os.environ.get("HANDOFF_QUEUE", "voltro-test:celery"),
    task_track_started=True,  # a running job reads STARTED, not PENDING
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@app.task(bind=True, base=OncePerJob, name="handoff_job")
def handoff_job(self: OncePerJob, payload: dict[str, Any]) -> str:
    markers = Path(os.environ["HANDOFF_MARKERS"])
    (markers / f"{marker_name(self.request.id)}__{uuid.uuid4().hex}").touch()
    give_up = time.monotonic() + HOLD_BOUND_S  # a bound for a test that died holding
    while (markers / "hold").exists() and time.monotonic() < give_up:
        time.sleep(0.02)
    if payload.get("fail"):
        raise RuntimeError(f"report for {payload['slot']} broke")
    return f"report for {payload['slot']} done"
