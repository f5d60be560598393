"""What a job engine must answer for a hand-off: enqueue a job under a given id, once, and say
how that job stands. Each engine module (:mod:`.arq`, …) implements :class:`JobEngine`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from ..context import FiringRef
from ..enums import Trigger

SLOT_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


class JobState(StrEnum):
    """Where a handed-off job stands, as its engine reports it."""

    QUEUED = "queued"
    """Enqueued (or deferred), not started."""
    RUNNING = "running"
    """A worker has started it."""
    SUCCEEDED = "succeeded"
    """It returned."""
    FAILED = "failed"
    """It raised (past the engine's own retries)."""
    NOT_FOUND = "not-found"
    """The engine knows no job of that id (never enqueued, or its result has expired)."""

    @property
    def terminal(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED)


class Tracking(StrEnum):
    """What a hand-off run's final status says about its job (the row's ``job_tracking``)."""

    FOLLOWED = "followed"
    """The engine reports completion: the row's ``succeeded``/``failed`` is the job's."""
    HANDED_OFF = "handed-off"
    """It cannot (no result backend): the row's ``succeeded`` means the job was enqueued."""


@dataclass(frozen=True, slots=True)
class JobReport:
    """A job's state, and its error when it failed."""

    state: JobState
    error: str | None = None
    error_type: str | None = None
    """The job's exception class name, when the engine keeps it."""


class JobEngine(Protocol):
    """One job engine, as a hand-off uses it. Each method says what it guarantees."""

    @property
    def name(self) -> str:
        """``arq``, ``celery``, ``procrastinate``: for messages and the docs."""
        ...

    @property
    def reports_completion(self) -> bool:
        """Whether :meth:`report` can tell a finished job's outcome (a result backend is
        configured). When not, a hand-off run ends ``succeeded`` once enqueued."""
        ...

    async def enqueue(self, job_id: str, task: str, payload: dict[str, Any]) -> bool:
        """Enqueue task ``task`` with ``payload`` under ``job_id``. Idempotent on ``job_id``
        within the engine's dedupe window: ``True`` when this call enqueued it, ``False`` when
        a job of that id already existed (nothing was sent). Raises on a broker failure."""
        ...

    async def report(self, job_id: str) -> JobReport:
        """How job ``job_id`` stands now (one look, no wait)."""
        ...


@runtime_checkable
class RecordingEngine(JobEngine, Protocol):
    """An engine whose queue lives in the ledger's own database (procrastinate on the
    ledger's Postgres): the run row's job columns and the job are written in **one
    transaction**, so a row names a job iff the job exists — no window to dedupe."""

    async def enqueue_recorded(
        self, key: str, task: str, payload: dict[str, Any], firing: FiringRef, tracking: Tracking
    ) -> str:
        """In one transaction: write ``job_id``/``tracking`` onto ``firing``'s row (iff it is
        still ``firing.replica_id``'s ``running`` row — else raise :class:`HandoffError`,
        nothing enqueued) and enqueue ``task`` (deduplicated on ``key``); returns the engine's
        job id, the one written."""
        ...


def job_id_for(
    name: str,
    scheduled_at: datetime,
    *,
    attempt: int = 1,
    trigger: Trigger = Trigger.SELF,
    run_id: str | None = None,
) -> str:
    """The job id of a firing: ``<name>@<slot>`` (the slot as UTC seconds,
    ``2026-03-04T02:00:00Z``) — identical on every replica and across retried triggers, so the
    engine's dedupe sees one job per slot. A retry within the slot (``RetryPolicy``) is a new
    job, ``#<attempt>``; a manual firing (Run now, a range backfill's re-run) names its run,
    ``/<run_id>``, so a re-run is not mistaken for the slot's first job."""
    job_id = f"{name}@{scheduled_at.astimezone(UTC).strftime(SLOT_FORMAT)}"
    if trigger is Trigger.MANUAL and run_id is not None:
        job_id += f"/{run_id}"
    if attempt > 1:
        job_id += f"#{attempt}"
    return job_id
