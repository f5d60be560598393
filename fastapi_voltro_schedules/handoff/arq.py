"""arq (Redis): each firing enqueued as an arq job whose ``_job_id`` is the slot's.

``pip install 'fastapi-voltro-schedules[arq]'``. The job is called as ``task(ctx, payload)``
(arq's context first, then the payload dict)::

    from fastapi_voltro_schedules.handoff import Handoff
    from fastapi_voltro_schedules.handoff.arq import ArqEngine

    scheduling = Scheduling(schedules=[...], workflows=Handoff(ArqEngine.from_url(REDIS_URL)))

What arq guarantees, and where it stops (``docs/handoff.md``): ``enqueue_job(_job_id=...)``
checks the job key and the result key under ``WATCH`` and enqueues in one ``MULTI`` — so a
second enqueue of an id returns ``None`` while the job is queued, running, or its result is
kept (``keep_result``, 1 h by default). Past that window the id is free again. Completion is
read from the result key (``success`` and the exception the job raised).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio
from arq.connections import ArqRedis, RedisSettings, create_pool
from arq.constants import default_queue_name
from arq.jobs import Job, JobStatus

from .base import JobReport, JobState

_STATES = {
    JobStatus.deferred: JobState.QUEUED,
    JobStatus.queued: JobState.QUEUED,
    JobStatus.in_progress: JobState.RUNNING,
    JobStatus.not_found: JobState.NOT_FOUND,
}


@dataclass(slots=True)
class ArqEngine:
    """Jobs on an arq queue. Give it a pool (``redis``) or build it with :meth:`from_url`
    (the pool is then made on first use, inside the app's loop)."""

    redis: ArqRedis | None = None
    settings: RedisSettings | None = None
    queue_name: str = default_queue_name
    _pool: ArqRedis | None = field(default=None, init=False, repr=False)
    _making: anyio.Lock = field(default_factory=anyio.Lock, init=False, repr=False)
    """A herd's firings ask for the pool at once: one of them makes it."""

    @classmethod
    def from_url(cls, url: str, *, queue_name: str = default_queue_name) -> ArqEngine:
        """An engine on the Redis at ``url`` (``redis://host:6379/0``)."""
        return cls(settings=RedisSettings.from_dsn(url), queue_name=queue_name)

    @property
    def name(self) -> str:
        return "arq"

    @property
    def reports_completion(self) -> bool:
        # arq always writes a result (keep_result > 0, the default) — unless a worker runs
        # with keep_result=0, which the docs tell against for handed-off tasks.
        return True

    async def pool(self) -> ArqRedis:
        if self.redis is not None:
            return self.redis
        async with self._making:
            if self._pool is None:
                self._pool = await create_pool(self.settings, default_queue_name=self.queue_name)
        return self._pool

    async def close(self) -> None:
        """Close the pool :meth:`from_url` made (a pool given in is the caller's)."""
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.aclose(close_connection_pool=True)

    async def enqueue(self, job_id: str, task: str, payload: dict[str, Any]) -> bool:
        redis = await self.pool()
        job = await redis.enqueue_job(task, payload, _job_id=job_id, _queue_name=self.queue_name)
        return job is not None

    async def report(self, job_id: str) -> JobReport:
        redis = await self.pool()
        job = Job(job_id, redis, _queue_name=self.queue_name)
        status = await job.status()
        if status is not JobStatus.complete:
            return JobReport(_STATES[status])
        info = await job.result_info()
        if info is None:  # the result expired between the two reads
            return JobReport(JobState.NOT_FOUND)
        if info.success:
            return JobReport(JobState.SUCCEEDED)
        error = info.result
        if isinstance(error, BaseException):
            return JobReport(JobState.FAILED, str(error) or repr(error), type(error).__name__)
        return JobReport(JobState.FAILED, str(error))
