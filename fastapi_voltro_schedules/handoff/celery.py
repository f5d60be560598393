"""Celery (Redis broker and result backend): each firing sent as a Celery task whose
``task_id`` is the slot's.

``pip install 'fastapi-voltro-schedules[celery]'``. The task is called as ``task(payload)``,
and must be declared with :class:`OncePerJob` as its base — Celery itself has no dedupe::

    from celery import Celery
    from fastapi_voltro_schedules.handoff import Handoff
    from fastapi_voltro_schedules.handoff.celery import CeleryEngine, OncePerJob

    jobs = Celery("reports", broker=REDIS_URL, backend=REDIS_URL)

    @jobs.task(base=OncePerJob, name="reports.rollup")
    def rollup(payload: dict) -> None: ...

    scheduling = Scheduling(schedules=[...], workflows=Handoff(CeleryEngine(jobs)))

What Celery guarantees, and where it stops (``docs/handoff.md``): a task id is a label, not a
key — sending the same id twice queues two messages. The ledger sends one per slot (one run
row per slot); the only second send is a replica taking over a silent row whose job the result
backend does not know yet (``PENDING``: Celery cannot tell "queued" from "never sent"). That
duplicate message is dropped on the worker: :class:`OncePerJob` claims the task id with
``SET NX`` in the result backend's Redis before the body runs, and a message whose id is
already claimed is ignored (``Ignore``: its state is not written, so it cannot overwrite the
first run's result). Completion is read from the result backend (``SUCCESS``/``FAILURE`` with
the exception); without a result backend a run's ``succeeded`` means "sent".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import anyio.to_thread
from celery import Celery, Task
from celery.backends.base import DisabledBackend
from celery.exceptions import Ignore

from ..errors import HandoffError
from .base import JobReport, JobState

CLAIM_PREFIX = "voltro:handoff:ran:"
"""Where :class:`OncePerJob` claims a task id, in the result backend's Redis."""
CLAIM_TTL_S = 7 * 24 * 3600
"""How long a claim is kept: past it, a message still carrying that id would run again."""

_STATES = {
    "PENDING": JobState.QUEUED,  # also "unknown": Celery cannot tell them apart
    "RECEIVED": JobState.QUEUED,
    "STARTED": JobState.RUNNING,
    "RETRY": JobState.RUNNING,
    "SUCCESS": JobState.SUCCEEDED,
}


class OncePerJob(Task):  # type: ignore[misc]  # celery is untyped
    """A Celery task base that runs each task id at most once: the first message to reach a
    worker claims the id (``SET NX`` in the result backend's Redis, kept
    :data:`CLAIM_TTL_S`); a later message with the same id is ignored without writing a state.
    Needs a Redis result backend."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        request = self.request
        if request.id is not None and not request.called_directly:
            client = getattr(self.backend, "client", None)
            if client is None:
                raise HandoffError(
                    f"task {self.name!r}: OncePerJob claims task ids in the result backend's "
                    f"Redis, but the backend is {type(self.backend).__name__} — configure "
                    "Celery(backend='redis://...')"
                )
            if not client.set(CLAIM_PREFIX + request.id, "1", nx=True, ex=CLAIM_TTL_S):
                raise Ignore()  # a duplicate message of a job that already ran (or runs)
        return super().__call__(*args, **kwargs)


@dataclass(slots=True)
class CeleryEngine:
    """Tasks of a Celery app (Redis broker; a result backend for the run to follow its job).
    Celery's client is synchronous: each call runs in a worker thread."""

    app: Celery
    queue: str | None = None
    """The queue to send to (``None``: the app's routing, else its default queue)."""

    @property
    def name(self) -> str:
        return "celery"

    @property
    def reports_completion(self) -> bool:
        return not isinstance(self.app.backend, DisabledBackend)

    async def enqueue(self, job_id: str, task: str, payload: dict[str, Any]) -> bool:
        return await anyio.to_thread.run_sync(self._send, job_id, task, payload)

    def _send(self, job_id: str, task: str, payload: dict[str, Any]) -> bool:
        if self.reports_completion and self.app.AsyncResult(job_id).state != "PENDING":
            return False  # the job ran or runs: a replica taking the row over only follows it
        options: dict[str, Any] = {"task_id": job_id}
        if self.queue is not None:
            options["queue"] = self.queue
        self.app.send_task(task, args=[payload], **options)
        return True

    async def report(self, job_id: str) -> JobReport:
        return await anyio.to_thread.run_sync(self._report, job_id)

    def _report(self, job_id: str) -> JobReport:
        result = self.app.AsyncResult(job_id)
        state = str(result.state)
        known = _STATES.get(state)
        if known is not None:
            return JobReport(known)
        if state == "FAILURE":
            error = result.result
            if isinstance(error, BaseException):
                return JobReport(JobState.FAILED, str(error) or repr(error), type(error).__name__)
            return JobReport(JobState.FAILED, str(error))
        return JobReport(JobState.FAILED, f"celery task {job_id} ended {state}")
