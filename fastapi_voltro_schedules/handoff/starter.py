"""The hand-off starters: :class:`Handoff` (given to ``Scheduling(workflows=...)``) and the
per-firing :class:`FiringHandoff` the runner puts on each firing's ``ctx.workflows``."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import anyio

from ..context import FiringRef
from ..errors import ConfigurationError, HandoffError, JobFailedError
from ..logs import logger
from .base import JobEngine, JobState, RecordingEngine, Tracking, job_id_for

DEFAULT_POLL_S = 0.5
"""How often a followed job's state is read. Real time: it waits on a worker, not on a
schedule."""
NOT_FOUND_GRACE_S = 30.0
"""How long a followed job may read ``not-found`` before the run fails: a result that expired
(or a job a broker lost) — never a job still queued, which every engine reports."""


@dataclass(slots=True)
class Handoff:
    """A workflow starter that hands each firing to ``engine`` — once per slot.

    ``follow``: whether a run follows its job to the end (the row's final status is the job's,
    ``max_runtime_ms`` covering the whole job) when the engine reports completion; ``False``
    ends each run ``succeeded`` once its job is enqueued. ``poll_interval``: seconds between
    two looks at a followed job.
    """

    engine: JobEngine
    follow: bool = True
    poll_interval: float = DEFAULT_POLL_S

    def __post_init__(self) -> None:
        if not self.poll_interval > 0:
            raise ConfigurationError(
                f"Handoff(poll_interval={self.poll_interval!r}): must be a positive number of "
                "seconds, e.g. poll_interval=0.5"
            )

    @property
    def tracking(self) -> Tracking:
        """What this starter's runs' final statuses mean."""
        if self.follow and self.engine.reports_completion:
            return Tracking.FOLLOWED
        return Tracking.HANDED_OFF

    async def start(self, name: str, payload: dict[str, Any]) -> str:
        """Enqueue ``name`` outside any firing (a random job id: there is no slot to derive
        one from, so no dedupe either); returns the job id without following it."""
        job_id = f"{name}@{uuid.uuid4().hex}"
        await self.engine.enqueue(job_id, name, payload)
        return job_id

    def for_firing(self, firing: FiringRef) -> FiringHandoff:
        """The starter of one firing (the runner calls this for each firing's context)."""
        return FiringHandoff(self, firing)

    async def follow_job(self, job_id: str) -> None:
        """Wait for job ``job_id`` to end: return when it succeeded, raise
        :class:`JobFailedError` when it failed. The caller's deadline (the watchdog) bounds
        the wait."""
        lost_since: float | None = None
        while True:
            report = await self.engine.report(job_id)
            if report.state is JobState.SUCCEEDED:
                return
            if report.state is JobState.FAILED:
                raise JobFailedError(
                    job_id, report.error or "(no error reported)", report.error_type
                )
            if report.state is JobState.NOT_FOUND:
                now = anyio.current_time()
                lost_since = now if lost_since is None else lost_since
                if now - lost_since >= NOT_FOUND_GRACE_S:
                    raise HandoffError(
                        f"{self.engine.name} job {job_id!r} is gone: the engine knows no job of "
                        "that id (its result expired, or the broker lost it) — raise the "
                        "engine's result retention above the schedule's max_runtime_ms"
                    )
            else:
                lost_since = None
            await anyio.sleep(self.poll_interval)


@dataclass(slots=True)
class FiringHandoff:
    """``ctx.workflows`` of one firing: :meth:`start` hands the firing's one job off."""

    handoff: Handoff
    firing: FiringRef
    started: str | None = field(default=None, init=False)

    async def start(self, name: str, payload: dict[str, Any]) -> str:
        """Hand this firing off as task ``name`` with ``payload``: the job id is derived from
        the slot (:func:`job_id_for`) and written onto the run's row first, then the job is
        enqueued (a no-op when it already exists: a retried trigger, a replica that took the
        row over), then — when followed — awaited: a failed job raises
        :class:`JobFailedError`, so the run is recorded ``failed`` with the job's error.
        Returns the job id. One firing hands off one job: fan out inside the job."""
        firing = self.firing
        if self.started is not None:
            raise HandoffError(
                f'schedule "{firing.name}": this firing already handed off job '
                f"{self.started!r} — one firing hands off one job (its id is the slot's); "
                f"start {name!r} from inside that job to fan out"
            )
        handoff = self.handoff
        engine = handoff.engine
        tracking = handoff.tracking
        recorded = firing.job_id
        fresh = False
        if recorded is not None:
            # A replica took this row over from one that stopped after writing the job onto it:
            # the same job — enqueued again where the write came before the enqueue (a no-op
            # when it exists), never a second one.
            job_id = self.started = recorded
            if not isinstance(engine, RecordingEngine):
                fresh = await engine.enqueue(job_id, name, payload)
        else:
            key = job_id_for(
                firing.name,
                firing.scheduled_at,
                attempt=firing.attempt,
                trigger=firing.trigger,
                run_id=firing.run_id,
            )
            self.started = key
            if isinstance(engine, RecordingEngine):
                job_id = await engine.enqueue_recorded(key, name, payload, firing, tracking)
                fresh = True
            else:
                # On the row before the enqueue: a crash between the two leaves a row naming a
                # job the engine may not have; the replica taking it over enqueues it.
                job_id = key
                await firing.record_job(job_id, tracking.value)
                fresh = await engine.enqueue(job_id, name, payload)
            self.started = job_id
        logger.info(
            "schedule: handed off  name=%s runId=%s engine=%s jobId=%s%s",
            firing.name,
            firing.run_id,
            engine.name,
            job_id,
            "" if fresh else " (already enqueued)",
        )
        if tracking is Tracking.FOLLOWED:
            await handoff.follow_job(job_id)
        return job_id
