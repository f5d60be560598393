"""Running one firing: the handler under its watchdog and heartbeat, and its outcome recorded.

The row is already ``running`` when we get here (the engine wrote it). Whatever happens —
success, an exception, the watchdog, shutdown — the row ends terminal, written with a
conditional update so a replica that already marked it ``abandoned`` is not overwritten.
"""

from __future__ import annotations

import asyncio
import contextvars
import traceback
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

import anyio

from .clock import iso_z
from .context import FiringRef, FiringStarter, ScheduleContext, WorkflowStarter
from .enums import RecordPolicy, RunStatus
from .errors import HandoffError, StoreUnavailableError
from .logs import logger, run_fields
from .records import CLOCK_TRIGGERS
from .retries import plan_retry
from .store import RunOutcome
from .tracing import RunSpans, run_spans

if TYPE_CHECKING:
    from fastapi import FastAPI
    from opentelemetry.trace import Span

    from .clock import Clock
    from .definition import Schedule
    from .ledger import Ledger
    from .store import RunRecord
    from .watchdog import Watchdog, Watched, WatchedHerd

FINISH_RETRY_BUDGET_S = 120.0
"""How long a terminal write is retried while the store is unreachable. Meanwhile the row keeps
its heartbeat (so no replica reads it dead while the beats land) and this process's reaper
leaves it alone; past the budget the row is left to the reaper like a crashed process's."""
SHUTDOWN_FINISH_BUDGET_S = 5.0
"""The same at shutdown (past the grace period): a short bound, the process is going."""
FINISH_BACKOFF_S = (0.25, 0.5, 1.0, 2.0, 4.0)
"""Pauses between terminal-write attempts (the last repeats). Real time: this waits on the
database, not on a schedule."""

ERROR_MESSAGE_LIMIT = 2000
ERROR_TRACEBACK_LIMIT = 16_000
"""Characters of a failed run's traceback kept in the ledger: the tail (the innermost frames and
the exception line are what a reader needs; a deep recursion's head is noise)."""


def bounded_traceback(error: BaseException, limit: int = ERROR_TRACEBACK_LIMIT) -> str:
    """``error``'s formatted traceback (causes included), at most ``limit`` characters."""
    text = "".join(traceback.format_exception(error))
    if len(text) <= limit:
        return text
    marker = f"[… {len(text) - limit} characters cut …]\n"
    return marker + text[len(text) - limit + len(marker) :]


@dataclass(slots=True)
class Runner:
    """Executes firings for one scheduler (one process)."""

    ledger: Ledger
    watchdog: Watchdog
    clock: Clock
    app: FastAPI | None = None
    workflows: WorkflowStarter | None = None
    on_retry: Callable[[Schedule, RunRecord], None] | None = None
    """Told of a run whose failure is not final once its pending retry is written (the row
    as it now reads): the dispatcher carries the next attempt out through its door."""
    _binds: bool = field(init=False, default=False)
    """``workflows`` is a hand-off starter (:class:`FiringStarter`): each firing's context gets
    one bound to it. Judged once: a runtime protocol check per firing costs a herd."""

    def __post_init__(self) -> None:
        self._binds = isinstance(self.workflows, FiringStarter)

    def context(self, schedule: Schedule, run: RunRecord) -> ScheduleContext:
        fired_at = run.fired_at or self.clock.now()
        workflows = self.workflows
        if self._binds:
            # a hand-off starter: the job's identity comes from this firing's slot, and the
            # job is written onto this run's row (see :mod:`.handoff`)
            workflows = cast(FiringStarter, workflows).for_firing(self._firing(run))
        return ScheduleContext(
            scheduled_at=run.scheduled_at,
            fired_at=fired_at,
            run_id=run.id,
            trigger=run.trigger,
            deadline=fired_at + schedule.max_runtime,
            schedule=schedule,
            app=self.app,
            workflows=workflows,
            # a copy: a handler that edits its args must not change the next firing's
            args=dict(schedule.args) if schedule.args else {},
            attempt=run.attempt,
        )

    def _firing(self, run: RunRecord) -> FiringRef:
        async def record_job(job_id: str, tracking: str) -> None:
            # Conditional on the row still being ours and running: a replica that read this
            # one dead and took the row over enqueues (the same job) itself.
            mine = await self.ledger.store.update_run(
                run.id,
                expect_status=RunStatus.RUNNING,
                expect_replica_id=self.ledger.replica_id,
                job_id=job_id,
                job_tracking=tracking,
            )
            if not mine:
                raise HandoffError(
                    f'schedule "{run.name}": run {run.id} is no longer this replica\'s running '
                    f"row (another replica took it over) — job {job_id!r} was not enqueued here"
                )

        return FiringRef(
            name=run.name,
            scheduled_at=run.scheduled_at,
            run_id=run.id,
            trigger=run.trigger,
            attempt=run.attempt,
            replica_id=self.ledger.replica_id,
            job_id=run.job_id,
            record_job=record_job,
        )

    async def execute(
        self,
        schedule: Schedule,
        run: RunRecord,
        handler_done: Callable[[Schedule, RunRecord], None],
        recorded: Callable[[Sequence[RunOutcome]], None],
    ) -> RunStatus:
        """Run one admitted firing and record how it ended; returns the recorded status. A
        firing carried out alone (a turn in line, Run now, an arrival) is a herd of one: the
        same :class:`RunBatch` as the timer's herd, so one set of rules says how a run ends
        (watchdog, failure, shutdown) and how its outcome is written."""
        batch = RunBatch(self, handler_done, recorded)
        await batch.run((schedule,), (run,))
        assert batch.first is not None, "a run batch records every run it started"
        return batch.first.status

    async def execute_many(
        self,
        schedules: Sequence[Schedule],
        runs: Sequence[RunRecord],
        handler_done: Callable[[Schedule, RunRecord], None],
        recorded: Callable[[Sequence[RunOutcome]], None],
        started: Callable[[], None] | None = None,
    ) -> None:
        """Run the herd's admitted firings, ``runs[i]`` of ``schedules[i]`` (see
        :class:`RunBatch`); returns once every outcome is recorded. ``handler_done`` is told
        as soon as a handler is over, before its terminal write reaches the database (the
        overlap rule looks at handlers, not at pending writes); ``recorded`` after each
        terminal write, ``started`` once every handler has taken its first step."""
        await RunBatch(self, handler_done, recorded, started).run(schedules, runs)

    def outcome(
        self,
        schedule: Schedule,
        run: RunRecord,
        timed_out: bool,
        error: BaseException | None,
        *,
        shutdown: bool = False,
    ) -> RunOutcome:
        """How a run ended, as the terminal write that records it (a failure is logged here,
        with its traceback). A failure of a schedule with a retry policy may not be final: the
        outcome then carries ``retry_at`` (:func:`.retries.plan_retry`) and is written by
        :meth:`RunBatch._defer`, not as a terminal write."""
        if not timed_out and not shutdown and error is None:
            return RunOutcome(
                run_id=run.id,
                status=RunStatus.SUCCEEDED,
                finished_at=self.clock.now(),
                name=run.name,
                trigger=run.trigger,
                scheduled_at=run.scheduled_at,
                fired_at=run.fired_at,
                attempt=run.attempt,
                # manual runs (Run now, a range backfill's re-runs) keep their rows: an
                # operator asked for each, and a backfill reads the succeeded ones back
                roll_up=schedule.record is RecordPolicy.FAILURES and run.trigger in CLOCK_TRIGGERS,
            )
        now = self.clock.now()
        trace: str | None = None
        status = RunStatus.FAILED
        if timed_out:
            tag = "timeout"
            message = f"exceeded max_runtime_ms={schedule.max_runtime_ms}" + (
                "; the worker thread was abandoned" if not schedule.awaits_handler else ""
            )
        elif shutdown:  # logged once by the engine ("scheduler: stopping"), not per run
            tag, message = "shutdown", "the app shut down mid-run"
        else:
            assert error is not None
            tag, message = type(error).__name__, str(error)
            trace = bounded_traceback(error)
        retry_at: datetime | None = None
        if schedule.retry is not None and not shutdown:
            decision = plan_retry(
                schedule.retry, run.attempt, now, schedule.retry_window_end(run.scheduled_at)
            )
            retry_at = decision.retry_at
            if decision.tag is not None:
                # final because the window closed: the tag says so, the message keeps the error
                message = f"{tag}: {message} — {decision.why}"
                tag = decision.tag
        if not shutdown:
            self._log_failure(schedule, run, tag, message, error, retry_at)
        return RunOutcome(
            run_id=run.id,
            status=status,
            finished_at=now,
            error_tag=tag,
            error_message=None if message is None else message[:ERROR_MESSAGE_LIMIT],
            error_traceback=trace,
            name=run.name,
            trigger=run.trigger,
            scheduled_at=run.scheduled_at,
            fired_at=run.fired_at,
            attempt=run.attempt,
            retry_at=retry_at,
        )

    def _log_failure(
        self,
        schedule: Schedule,
        run: RunRecord,
        tag: str,
        message: str,
        error: BaseException | None,
        retry_at: datetime | None,
    ) -> None:
        fields = self._fields(run, RunStatus.FAILED, error_tag=tag, attempt=run.attempt)
        trace = None if tag == "timeout" else error
        if retry_at is not None:
            assert schedule.retry is not None
            logger.warning(
                "schedule: attempt failed — retrying  name=%s runId=%s attempt=%d/%d "
                "errorTag=%s retryAt=%s: %s",
                schedule.name,
                run.id,
                run.attempt,
                schedule.retry.attempts,
                tag,
                iso_z(retry_at),
                message,
                extra=fields,
            )
            return
        attempts = "" if run.attempt == 1 else f" attempts={run.attempt}"
        if trace is None:
            logger.warning(
                "schedule: run failed  name=%s runId=%s errorTag=%s%s: %s",
                schedule.name,
                run.id,
                tag,
                attempts,
                message,
                extra=fields,
            )
        else:
            logger.warning(
                "schedule: run failed  name=%s runId=%s errorTag=%s%s",
                schedule.name,
                run.id,
                tag,
                attempts,
                exc_info=trace,
                extra=fields,
            )

    @staticmethod
    def _fields(run: RunRecord, status: RunStatus, **more: Any) -> dict[str, Any]:
        slot = iso_z(run.scheduled_at)
        return run_fields(run.name, run.id, slot, status.value, trigger=run.trigger.value, **more)

    async def _finish(
        self, outcomes: Sequence[RunOutcome], *, budget: float = FINISH_RETRY_BUDGET_S
    ) -> None:
        """Write the terminal statuses (each carries its schedule's name, for the warning),
        each iff its row is still ours and ``running`` — retried with backoff for ``budget``
        seconds while the store is unreachable (a blip at the end of a run must not turn a
        success into ``abandoned``). While retrying, the rows keep beating."""
        give_up = anyio.current_time() + budget
        beating: list[Watched] = []
        error: StoreUnavailableError | None = None
        attempt = 0
        try:
            while True:
                try:
                    await self.ledger.finish_many(outcomes)
                    if attempt:
                        logger.info(
                            "schedule: outcome recorded after %d retries  name=%s runId=%s",
                            attempt,
                            outcomes[0].name,
                            outcomes[0].run_id,
                        )
                    return
                except StoreUnavailableError as exc:
                    pause = FINISH_BACKOFF_S[min(attempt, len(FINISH_BACKOFF_S) - 1)]
                    if anyio.current_time() + pause > give_up:
                        error = exc
                        break
                    if attempt == 0:
                        logger.warning(
                            "schedule: could not record the outcome — retrying for up to %g s  "
                            "name=%s runId=%s status=%s runs=%d: %s",
                            budget,
                            outcomes[0].name,
                            outcomes[0].run_id,
                            outcomes[0].status.value,
                            len(outcomes),
                            exc,
                        )
                        beating = [self._keep_beating(o) for o in outcomes]
                    attempt += 1
                    await anyio.sleep(pause)
        finally:
            for watched in beating:
                self.watchdog.unwatch(watched)
        if error is not None:
            # The rows stay `running`; without beats they read dead after 3 intervals and the
            # next replica to look marks them abandoned.
            first = outcomes[0]
            name = first.name
            others = len({o.name for o in outcomes}) - 1
            logger.warning(
                "schedule: could not record the outcome  name=%s%s runId=%s status=%s runs=%d: %s",
                name,
                f" (+{others} more schedules)" if others else "",
                first.run_id,
                first.status.value,
                len(outcomes),
                error,
                extra=run_fields(
                    name or "", first.run_id, outcome=first.status.value, runs=len(outcomes)
                ),
            )

    def _keep_beating(self, outcome: RunOutcome) -> Watched:
        return self.watchdog.keep_alive(outcome.run_id)


class RunBatch:
    """Many admitted firings (the herd) run with the outcomes of :meth:`Runner.execute`.

    Each handler is its own asyncio task; everything around it is done in bulk: a
    done-callback per run instead of a wrapping coroutine and cancel scope, the watchdog
    cancels the task itself, and terminal writes are flushed in batches as handlers end
    (``recorded`` is told after each flush). At 1,000 firings a second the per-run wrapper cost
    more than the writes. Cancelling :meth:`run` (shutdown) cancels the handlers still running
    and records them ``failed/shutdown``.
    """

    def __init__(
        self,
        runner: Runner,
        handler_done: Callable[[Schedule, RunRecord], None],
        recorded: Callable[[Sequence[RunOutcome]], None],
        started: Callable[[], None] | None = None,
    ) -> None:
        self._runner = runner
        self._handler_done = handler_done
        self._recorded = recorded
        self._started = started
        # A live task maps to its index in the herd's aligned lists: a (schedule, run, watch)
        # triple per firing would be one more object per firing for the collector to promote
        # (an int is not tracked). Runs sharing a deadline share one watch (WatchedHerd).
        self._live: dict[asyncio.Task[None], int] = {}
        self._schedules: Sequence[Schedule] = ()
        self._runs: Sequence[RunRecord] = ()
        self._watch_of: list[WatchedHerd] = []
        self._place: list[int] = []
        self._ended: list[RunOutcome] = []
        self._spans: list[Span] = []
        """Each run's OpenTelemetry span, when the app traces (:mod:`.tracing`); else empty."""
        self._deferred: list[tuple[int, RunOutcome]] = []
        """Failures to be retried within their slot (herd index, outcome): not terminal."""
        self._wake = asyncio.Event()
        self.first: RunOutcome | None = None
        """How the first run ended (a herd of one: its outcome, see :meth:`Runner.execute`)."""

    def _start(self, schedules: Sequence[Schedule], runs: Sequence[RunRecord]) -> None:
        self._schedules, self._runs = schedules, runs
        runner, loop = self._runner, asyncio.get_running_loop()
        clock = runner.clock
        at = (clock.monotonic(), clock.now())
        done = self._done  # one bound method for the herd, not one per task
        # …and one context for its calls: add_done_callback copies the current context per
        # call otherwise. It is the context it would copy (this one); the handlers' tasks
        # each still get their own.
        callbacks = contextvars.copy_context()
        live, watch_of, place = self._live, self._watch_of, self._place
        watchdog = runner.watchdog
        by_deadline: dict[datetime, WatchedHerd] = {}
        tracing, spans = run_spans(), self._spans
        for i, (schedule, run) in enumerate(zip(schedules, runs, strict=True)):
            ctx = runner.context(schedule, run)
            # A plain async handler is the task's own coroutine: no wrapper per firing.
            handler = schedule.handler
            if handler is not None and schedule.workflow is None and schedule.awaits_handler:
                coro = cast(Coroutine[Any, Any, None], handler(ctx))
            else:
                coro = schedule(ctx)
            if tracing is None:
                task = loop.create_task(coro)
            else:  # the handler runs with its run's span current
                span, task_context = tracing.start(schedule, run)
                spans.append(span)
                task = loop.create_task(coro, context=task_context)
            watch = by_deadline.get(ctx.deadline)
            if watch is None:
                watch = by_deadline[ctx.deadline] = watchdog.watch_herd(ctx.deadline, at)
            watch_of.append(watch)
            place.append(watch.add(run.id, task))
            live[task] = i
            task.add_done_callback(done, context=callbacks)

    def _done(self, task: asyncio.Task[None]) -> None:
        i = self._live.pop(task)
        schedule, run = self._schedules[i], self._runs[i]
        timed_out = self._runner.watchdog.end(self._watch_of[i], self._place[i])
        self._handler_done(schedule, run)
        error = None if task.cancelled() else task.exception()
        shutdown = task.cancelled() and not timed_out
        outcome = self._runner.outcome(schedule, run, timed_out, error, shutdown=shutdown)
        if self._spans:
            RunSpans.end(self._spans[i], outcome, error)
        if i == 0:
            self.first = outcome
        if outcome.retry_at is None:
            self._ended.append(outcome)
        else:
            self._deferred.append((i, outcome))
        self._wake.set()

    async def _flush(self, budget: float = FINISH_RETRY_BUDGET_S) -> None:
        ended, self._ended = self._ended, []
        await self._runner._finish(ended, budget=budget)
        self._recorded(ended)

    async def _defer(self) -> None:
        """Write each failure to be retried as its row's pending retry (the row stays
        ``running``, with ``retry_at``), then hand the row to :attr:`Runner.on_retry`. A write
        the store refuses turns the failure final (recorded as any other, with its retries);
        a row no longer ours (marked abandoned meanwhile) is left as it is."""
        deferred, self._deferred = self._deferred, []
        runner = self._runner
        store, me = runner.ledger.store, runner.ledger.replica_id
        for i, outcome in deferred:
            schedule, run = self._schedules[i], self._runs[i]
            try:
                mine = await store.defer_run(outcome, me)
            except StoreUnavailableError as exc:
                logger.warning(
                    "schedule: could not record the pending retry — the failure is final  "
                    "name=%s runId=%s: %s",
                    run.name,
                    run.id,
                    exc,
                )
                self._ended.append(replace(outcome, retry_at=None))
                continue
            if not mine or runner.on_retry is None:
                self._recorded([outcome])
                continue
            pending = replace(
                run,
                retry_at=outcome.retry_at,
                heartbeat_at=outcome.finished_at,
                error_tag=outcome.error_tag,
                error_message=outcome.error_message,
                error_traceback=outcome.error_traceback,
            )
            runner.on_retry(schedule, pending)

    async def run(self, schedules: Sequence[Schedule], runs: Sequence[RunRecord]) -> None:
        """Start the handlers of ``runs`` (their ``running`` rows are written), ``runs[i]``
        of ``schedules[i]``, and record each outcome as it comes."""
        self._start(schedules, runs)
        del schedules, runs
        try:
            if self._started is not None:
                await asyncio.sleep(0)  # the handlers' tasks were queued first: they run now
                self._started()
            while self._live or self._ended or self._deferred:
                if self._deferred:
                    await self._defer()
                elif self._ended:
                    await self._flush()
                else:
                    self._wake.clear()
                    await self._wake.wait()
        except BaseException:
            # Shutdown past the grace period: cancel what still runs, record it, then go.
            with anyio.CancelScope(shield=True):
                for task in list(self._live):
                    task.cancel()
                if self._live:
                    await asyncio.wait(list(self._live))
                if self._deferred:
                    # written as pending retries: another replica (or the next boot) takes
                    # them over once this one stops beating
                    await self._defer()
                while self._ended:
                    await self._flush(SHUTDOWN_FINISH_BUDGET_S)
            raise
