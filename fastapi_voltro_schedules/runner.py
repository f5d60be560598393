"""Running one firing: the handler under its watchdog and heartbeat, and its outcome recorded.

The row is already ``running`` when we get here (the engine wrote it). Whatever happens —
success, an exception, the watchdog, shutdown — the row ends terminal, written with a
conditional update so a replica that already marked it ``abandoned`` is not overwritten.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import anyio

from .context import ScheduleContext, WorkflowStarter
from .enums import RunStatus
from .errors import ConfigurationError, StoreUnavailableError
from .logs import logger
from .store import RunOutcome

if TYPE_CHECKING:
    from fastapi import FastAPI

    from .clock import Clock
    from .definition import Schedule
    from .ledger import Ledger
    from .store import RunRecord
    from .watchdog import Watchdog

ERROR_MESSAGE_LIMIT = 2000


@dataclass(slots=True)
class Runner:
    """Executes firings for one scheduler (one process)."""

    ledger: Ledger
    watchdog: Watchdog
    clock: Clock
    app: FastAPI | None = None
    workflows: WorkflowStarter | None = None

    def context(self, schedule: Schedule, run: RunRecord) -> ScheduleContext:
        fired_at = run.fired_at or self.clock.now()
        return ScheduleContext(
            scheduled_at=run.scheduled_at,
            fired_at=fired_at,
            run_id=run.id,
            trigger=run.trigger,
            deadline=fired_at + schedule.max_runtime,
            schedule=schedule,
            app=self.app,
            workflows=self.workflows,
        )

    async def execute(
        self,
        schedule: Schedule,
        run: RunRecord,
        handler_done: Callable[[], None] | None = None,
    ) -> RunStatus:
        """Run the handler of ``run`` and record how it ended; returns the recorded status.

        ``handler_done`` is called as soon as the handler is over, before the terminal write
        reaches the database: the overlap rule looks at handlers, not at pending writes.
        """
        ctx = self.context(schedule, run)
        error: BaseException | None = None
        try:
            with anyio.CancelScope() as scope:
                watched = self.watchdog.watch(run.id, ctx.fired_at, ctx.deadline, scope)
                try:
                    await self._invoke(schedule, ctx)
                except Exception as exc:
                    error = exc
                finally:
                    self.watchdog.unwatch(watched)
        except anyio.get_cancelled_exc_class():
            # Shutdown cancelled us past the grace period: say so in the ledger, then go.
            if handler_done is not None:
                handler_done()
            with anyio.CancelScope(shield=True):
                await self.finish(run, RunStatus.FAILED, "shutdown", "the app shut down mid-run")
            raise
        if handler_done is not None:
            handler_done()
        if watched.timed_out:
            status, tag = RunStatus.FAILED, "timeout"
            message = (
                f"exceeded max_runtime_ms={schedule.max_runtime_ms}"
                + ("; the worker thread was abandoned" if not _is_async(schedule) else "")
            )
        elif error is not None:
            status, tag, message = RunStatus.FAILED, type(error).__name__, str(error)
            logger.warning(
                "schedule: run failed  name=%s runId=%s errorTag=%s", schedule.name, run.id, tag
            )
        else:
            status, tag, message = RunStatus.SUCCEEDED, None, None
        await self.finish(run, status, tag, message)
        return status

    async def finish(
        self, run: RunRecord, status: RunStatus, tag: str | None, message: str | None
    ) -> None:
        """Write the terminal status iff the row is still ours and ``running``."""
        try:
            await self.ledger.finish(
                RunOutcome(
                    run_id=run.id,
                    status=status,
                    finished_at=self.clock.now(),
                    error_tag=tag,
                    error_message=None if message is None else message[:ERROR_MESSAGE_LIMIT],
                )
            )
        except StoreUnavailableError as exc:
            # The row stays `running`; without beats it reads dead after 3 intervals and the
            # next replica to look marks it abandoned.
            logger.warning(
                "schedule: could not record the outcome  name=%s runId=%s status=%s: %s",
                run.name,
                run.id,
                status.value,
                exc,
            )

    async def _invoke(self, schedule: Schedule, ctx: ScheduleContext) -> None:
        if schedule.workflow is not None:
            if self.workflows is None:
                raise ConfigurationError(
                    f'schedule "{schedule.name}" targets workflow "{schedule.workflow.name}" but '
                    "no workflow starter is configured — pass Scheduling(workflows=...)"
                )
            await self.workflows.start(schedule.workflow.name, schedule.workflow.build_payload(ctx))
            return
        handler = schedule.handler
        assert handler is not None
        if _is_async(schedule):
            await cast(Awaitable[Any], handler(ctx))
            return
        # A plain def runs in a worker thread; on timeout the thread is abandoned (Python
        # cannot kill a thread) and keeps running until it returns.
        result = await anyio.to_thread.run_sync(handler, ctx, abandon_on_cancel=True)
        if inspect.isawaitable(result):
            await result


def _is_async(schedule: Schedule) -> bool:
    handler = schedule.handler
    if handler is None:
        return True
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004 - async callable objects
    )
