"""procrastinate (Postgres): each firing deferred as a procrastinate job **in the same
transaction** as the run row's job columns — procrastinate on the ledger's own database.

``pip install 'fastapi-voltro-schedules[procrastinate]'``. The job is called as
``task(payload=...)``::

    import procrastinate
    from fastapi_voltro_schedules.handoff import Handoff
    from fastapi_voltro_schedules.handoff.procrastinate import ProcrastinateEngine

    jobs = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=LEDGER_DSN))
    scheduling = Scheduling(schedules=[...], workflows=Handoff(ProcrastinateEngine(jobs)))

What procrastinate guarantees, and where it stops (``docs/handoff.md``): its queueing lock is a
unique index on ``queueing_lock`` *while the job is* ``todo`` — once a worker takes the job, a
second defer with the same lock goes through. So the dedupe here is not the lock but the
transaction: the ``UPDATE`` that writes the job onto the run row (conditional on the row still
being this replica's ``running`` row) and procrastinate's defer (``configure_task(...,
connection=...)``) commit together or not at all. A row names a job iff the job exists; a
replica taking a silent row over follows the job the row names and defers nothing. The
queueing lock (``<name>@<slot>``) still refuses a second ``todo`` job of the slot from any
other path. procrastinate keeps a job's status, not its error: a failed job's row says so and
points to the worker's log.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio
import procrastinate
from procrastinate import exceptions as procrastinate_errors
from procrastinate.jobs import Status
from sqlalchemy import and_, bindparam, update
from sqlalchemy.dialects.postgresql.psycopg import dialect as psycopg_dialect

from ..context import FiringRef
from ..enums import RunStatus
from ..errors import HandoffError
from ..models import runs_table
from .base import JobReport, JobState, Tracking

_RUNS = runs_table
# The conditional write of the job onto the run row, in psycopg's paramstyle (built from the
# table model, so it cannot drift from the schema): iff the row is still this replica's
# ``running`` row — a replica that took it over has it now, and nothing is deferred here.
_RECORD = str(
    update(_RUNS)
    .where(
        and_(
            _RUNS.c.id == bindparam("run_id"),
            _RUNS.c.status == bindparam("status"),
            _RUNS.c.replica_id == bindparam("replica_id"),
        )
    )
    .values(job_id=bindparam("job_id"), job_tracking=bindparam("job_tracking"))
    .compile(dialect=psycopg_dialect())  # type: ignore[no-untyped-call]
)
_STATES = {
    Status.TODO: JobState.QUEUED,
    Status.DOING: JobState.RUNNING,
    Status.SUCCEEDED: JobState.SUCCEEDED,
}


@dataclass(slots=True)
class ProcrastinateEngine:
    """Jobs of a procrastinate ``App`` whose ``PsycopgConnector`` points at the ledger's own
    Postgres database (the same one as ``VOLTRO_DATABASE_URL``). The app is opened on first
    use when it is not open yet (and closed by :meth:`close` then)."""

    app: procrastinate.App
    queue: str | None = None
    """The queue to defer to (``None``: the task's own, else procrastinate's default)."""
    _opened: bool = False
    _opening: anyio.Lock = field(default_factory=anyio.Lock, init=False, repr=False)
    """A herd's firings find the app closed at once: one of them opens it."""

    @property
    def name(self) -> str:
        return "procrastinate"

    @property
    def reports_completion(self) -> bool:
        return True

    async def _connector(self) -> procrastinate.PsycopgConnector:
        connector = self.app.connector
        if not isinstance(connector, procrastinate.PsycopgConnector):
            raise HandoffError(
                f"ProcrastinateEngine needs a procrastinate.PsycopgConnector (got "
                f"{type(connector).__name__}): the job is deferred on the connection that "
                "writes the run row, in one transaction"
            )
        async with self._opening:
            try:
                connector.pool  # noqa: B018 - raises AppNotOpen when the app is not open
            except procrastinate_errors.AppNotOpen:
                await self.app.open_async()
                self._opened = True
        return connector

    async def close(self) -> None:
        """Close the app if this engine opened it."""
        if self._opened:
            self._opened = False
            await self.app.close_async()

    async def enqueue(self, job_id: str, task: str, payload: dict[str, Any]) -> bool:
        """Defer outside any run row (``Handoff.start`` outside a firing): deduplicated by the
        queueing lock while a job of ``job_id`` waits (``todo``)."""
        await self._connector()
        try:
            await self._deferrer(task, job_id, None).defer_async(payload=payload)
        except procrastinate_errors.AlreadyEnqueued:
            return False
        return True

    async def enqueue_recorded(
        self, key: str, task: str, payload: dict[str, Any], firing: FiringRef, tracking: Tracking
    ) -> str:
        connector = await self._connector()
        async with connector.pool.connection() as conn, conn.transaction():
            # the job's id is procrastinate's own (a bigserial): written in the same
            # transaction, after the defer that makes it
            try:
                job = await self._deferrer(task, key, conn).defer_async(payload=payload)
            except procrastinate_errors.AlreadyEnqueued as exc:
                raise HandoffError(
                    f"procrastinate already has a waiting job with queueing lock {key!r} that "
                    f"no run row names — it was deferred outside this schedule's firings; "
                    "nothing was deferred for this run"
                ) from exc
            written = await conn.execute(
                _RECORD,  # built from the table model: no user input in the text
                {
                    "run_id": firing.run_id,
                    "status": RunStatus.RUNNING.value,
                    "replica_id": firing.replica_id,
                    "job_id": str(job),
                    "job_tracking": tracking.value,
                },
            )
            if written.rowcount != 1:
                raise HandoffError(
                    f'schedule "{firing.name}": run {firing.run_id} is no longer this '
                    "replica's running row (another replica took it over) — the job was not "
                    "deferred here"
                )
        return str(job)

    def _deferrer(self, task: str, key: str, connection: Any) -> Any:
        options: dict[str, Any] = {"queueing_lock": key}
        if self.queue is not None:
            options["queue"] = self.queue
        if connection is not None:
            options["connection"] = connection
        return self.app.configure_task(task, **options)

    async def report(self, job_id: str) -> JobReport:
        await self._connector()
        try:
            status = await self.app.job_manager.get_job_status_async(int(job_id))
        except procrastinate_errors.NoResult:
            return JobReport(JobState.NOT_FOUND)
        state = _STATES.get(status)
        if state is not None:
            return JobReport(state)
        return JobReport(
            JobState.FAILED,
            f"procrastinate job {job_id} ended {status.value} — procrastinate keeps no error "
            "text: the worker's log has the traceback",
            None,
        )
