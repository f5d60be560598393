"""The Celery side of the example's Celery variant: the app (Redis broker and result
backend, ``EXAMPLE_CELERY_REDIS_URL``) and the task the nightly schedule becomes.

Start the worker with ``celery -A example_app.handoff.tasks worker --loglevel=INFO``.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from celery import Celery

from fastapi_voltro_schedules.handoff.celery import OncePerJob

log = logging.getLogger("example_app")

REDIS_URL = os.environ.get("EXAMPLE_CELERY_REDIS_URL", "redis://127.0.0.1:6379/0")
app = Celery("example_app", broker=REDIS_URL, backend=REDIS_URL)
app.conf.update(
    task_track_started=True,  # the ledger's follower sees the job running, not just queued
    broker_connection_retry_on_startup=True,
)


# OncePerJob: a duplicate message of one slot's task id (a replica that took the run over
# and sent again) runs nothing. The task id is the slot's: "ledgerExport@2026-03-02T03:00:00Z".
@app.task(bind=True, base=OncePerJob, name="example.export_ledger")
def export_ledger(self: OncePerJob, payload: dict[str, Any]) -> dict[str, Any]:
    """The heavy part of the nightly export (here: a log line), run by the worker."""
    log.info("exporting the ledger of %s (job %s)", payload["day"], self.request.id)
    return {"day": payload["day"], "exported": True}
