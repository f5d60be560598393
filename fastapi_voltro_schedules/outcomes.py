"""The outcome hook: ``Scheduling(on_outcome=callback)``, called once per recorded outcome.

Every terminal row this process writes to the ledger — ``succeeded``, ``failed`` (an
exception, a timeout, a shutdown, a corpse marked ``abandoned``), ``skipped``, ``missed`` — is
handed to the callback as a :class:`RecordedOutcome`, after the write committed. That is the
place to send failures to Sentry or Slack::

    async def notify(outcome: RecordedOutcome) -> None:
        if outcome.status is RunStatus.FAILED:
            await slack.post(f"{outcome.name} failed: {outcome.error_message}")

    scheduling = Scheduling.from_package("app", on_outcome=notify)

**Once per outcome, cluster-wide.** The replica that writes a row calls its hook; the others
do not see it. A slot retried within its window (``RetryPolicy``) is one outcome: the hook is
called for its final attempt only, with :attr:`RecordedOutcome.attempts` saying how many ran.

A terminal write that fails (database down) is not an outcome: the row stays
``running`` and whichever replica later marks it ``abandoned`` calls its hook for that.

**Never in the engine's way.** Outcomes are queued and the callback runs in a task of its own,
one outcome at a time, in the order they were recorded: a slow callback delays later callbacks,
never a firing or a ledger write. An ``async def`` is awaited; a plain ``def`` runs in a worker
thread (so a blocking HTTP call does not stall the event loop). A callback that raises is
logged with its traceback and the next outcome is delivered as usual. At shutdown the queue is
drained for up to :data:`DRAIN_SECONDS` after the engine stopped; what is left then is logged.
At most :data:`QUEUE_LIMIT` outcomes wait: beyond that new ones are dropped, with a warning
(a callback that cannot keep up must not grow the process without bound).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from .clock import iso_z
from .definition import is_async_callable
from .enums import RunStatus, Trigger
from .errors import ConfigurationError
from .logs import logger, run_fields
from .values import value

__all__ = ["DRAIN_SECONDS", "QUEUE_LIMIT", "OutcomeHook", "OutcomeHooks", "RecordedOutcome"]

QUEUE_LIMIT = 10_000
DRAIN_SECONDS = 5.0


@value
class RecordedOutcome:
    """One terminal row, as written to ``_voltro_schedule_runs``."""

    name: str
    run_id: str
    status: RunStatus
    """``succeeded``, ``failed``, ``skipped`` or ``missed``."""
    trigger: Trigger
    scheduled_at: datetime
    fired_at: datetime | None
    """``None`` for a ``missed`` slot (it never fired)."""
    finished_at: datetime | None
    error_tag: str | None = None
    """Why a run failed: the exception's class name, ``timeout``, ``shutdown``, ``abandoned``."""
    error_message: str | None = None
    error_traceback: str | None = None
    """The bounded traceback of a run whose handler raised (as stored in the ledger)."""
    replica_id: str = ""
    attempts: int = 1
    """How many attempts the slot took (``RetryPolicy``: a run retried twice and then
    succeeded says 3). The hook is called once per slot, for its final outcome only."""


OutcomeHook = Callable[[RecordedOutcome], Awaitable[None] | None]
"""``Scheduling(on_outcome=…)``: an ``async def`` or a plain ``def`` taking the outcome."""


def check_hook(hook: object) -> OutcomeHook | None:
    """``hook`` if it is a callable (or ``None``); a clear error otherwise."""
    if hook is None or callable(hook):
        return hook
    raise ConfigurationError(
        f"Scheduling(on_outcome=...) must be a function taking a RecordedOutcome (async def or "
        f"def), got {type(hook).__name__}"
    )


class OutcomeHooks:
    """The queue between the store seam (:meth:`submit`, never blocks) and the callback
    (:meth:`run`, a task of the scheduler's)."""

    def __init__(
        self, hook: OutcomeHook, *, limit: int = QUEUE_LIMIT, drain_seconds: float = DRAIN_SECONDS
    ) -> None:
        self.hook = hook
        self.drain_seconds = drain_seconds
        self._async = is_async_callable(hook)
        self._send: MemoryObjectSendStream[RecordedOutcome]
        self._receive: MemoryObjectReceiveStream[RecordedOutcome]
        self._send, self._receive = anyio.create_memory_object_stream[RecordedOutcome](limit)
        self._done = anyio.Event()
        self.dropped = 0
        self.delivered = 0

    def submit(self, outcome: RecordedOutcome) -> None:
        """Queue ``outcome`` for the callback (from the event loop's thread)."""
        try:
            self._send.send_nowait(outcome)
        except anyio.WouldBlock:
            self.dropped += 1
            logger.warning(
                "schedule: outcome hook is behind — %d outcomes waiting; not calling it for "
                "name=%s runId=%s status=%s (dropped so far: %d)",
                self._send.statistics().current_buffer_used,
                outcome.name,
                outcome.run_id,
                outcome.status.value,
                self.dropped,
                extra=_fields(outcome),
            )
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            logger.warning(
                "schedule: scheduler stopping — outcome hook not called  name=%s runId=%s "
                "status=%s",
                outcome.name,
                outcome.run_id,
                outcome.status.value,
                extra=_fields(outcome),
            )

    async def run(self) -> None:
        """Deliver queued outcomes until :meth:`close` (then drain) or cancellation."""
        try:
            async with self._receive:
                async for outcome in self._receive:
                    await self._deliver(outcome)
        finally:
            self._done.set()

    async def close(self) -> None:
        """Stop accepting outcomes; wait up to :attr:`drain_seconds` for the queued ones to be
        delivered."""
        self._send.close()
        timeout = self.drain_seconds
        with anyio.move_on_after(timeout):
            await self._done.wait()
        left = self._receive.statistics().current_buffer_used if not self._done.is_set() else 0
        if left:
            logger.warning(
                "schedule: outcome hook not called for %d outcomes — still busy %.0f s after "
                "shutdown",
                left,
                timeout,
            )

    async def _deliver(self, outcome: RecordedOutcome) -> None:
        try:
            if self._async:
                await self.hook(outcome)  # type: ignore[misc]
            else:
                result: Any = await anyio.to_thread.run_sync(self.hook, outcome)
                if inspect.isawaitable(result):
                    await result
        except Exception:
            # The app's callback broke, not the scheduler: say so with its traceback and go on.
            logger.exception(
                "schedule: outcome hook raised  name=%s runId=%s status=%s",
                outcome.name,
                outcome.run_id,
                outcome.status.value,
                extra=_fields(outcome),
            )
        else:
            self.delivered += 1


def _fields(outcome: RecordedOutcome) -> dict[str, Any]:
    return run_fields(
        outcome.name,
        outcome.run_id,
        iso_z(outcome.scheduled_at),
        outcome.status.value,
        trigger=outcome.trigger.value,
    )
