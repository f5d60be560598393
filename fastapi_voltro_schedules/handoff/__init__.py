"""Hand each firing to a distributed job engine — once.

A schedule whose work outgrows the web process gives it to Celery, arq or procrastinate: pass
a hand-off starter as ``Scheduling(workflows=...)`` and declare the schedule with
``workflow=WorkflowTarget(name=<the engine's task>)`` (or call ``ctx.workflows.start(...)`` from
a handler). The firing still comes through the dispatcher's one door, is claimed and gets its
run row like any other; the hand-off is how that run executes:

1. the job's id is derived from the slot (:func:`job_id_for`: ``<name>@<slot>``) and written
   onto the run's row **before** the enqueue (or with it, in one transaction:
   :class:`RecordingEngine`);
2. the job is enqueued under that id, with the engine's own deduplication where it has one;
3. where the engine reports completion, the run follows the job: the row stays ``running``
   (beating) and ends with the job's outcome, under the schedule's ``max_runtime_ms``; where
   it cannot, the row's ``succeeded`` means "handed off" (``job_tracking="handed-off"``).

A replica that dies after step 1 leaves a silent row naming its job: another replica takes the
row over, enqueues the same id again (a no-op when the job exists) and follows it.

The engines live in their own modules, each behind its optional extra: :mod:`.arq`
(``[arq]``), :mod:`.celery` (``[celery]``), :mod:`.procrastinate` (``[procrastinate]``, on
the ledger's own Postgres: the row's job and the job commit in one transaction). See
``docs/handoff.md`` for exactly which guarantee each gives, and where it stops.
"""

from .base import JobEngine, JobReport, JobState, RecordingEngine, Tracking, job_id_for
from .starter import FiringHandoff, Handoff

__all__ = [
    "FiringHandoff",
    "Handoff",
    "JobEngine",
    "JobReport",
    "JobState",
    "RecordingEngine",
    "Tracking",
    "job_id_for",
]
