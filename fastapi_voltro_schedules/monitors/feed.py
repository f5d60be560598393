"""From the ledger's writes to the monitors: check-ins queued at the store seam, sent from a
task per monitor.

The store seam (:class:`~..store.instrumented.InstrumentedStore`) tells :class:`Monitors`
about every ``running`` row this process committed (:meth:`Monitors.started`) and every
terminal one (:meth:`Monitors.recorded`). Each becomes a :class:`~.base.CheckIn` queued for
each monitor that watches the schedule — a ``send_nowait``, never an await: a monitor that is
slow or down delays its own later check-ins, never a firing or a ledger write. Without a
monitor configured none of this exists: the seam's check is one ``is None`` per write.

A send that fails with :class:`~.base.CheckInError` ``retry=True`` is tried again, at most
:data:`ATTEMPTS` times in all, :data:`BACKOFF_S` apart; then it is logged and dropped. At most
:data:`QUEUE_LIMIT` check-ins wait per monitor (beyond that new ones are dropped, with a
warning); at shutdown each queue is drained for up to :data:`DRAIN_SECONDS`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..clock import iso_z
from ..enums import RunStatus, Trigger
from ..errors import ConfigurationError
from ..exclusions import EXCLUDED_TAG
from ..logs import logger, run_fields
from .base import CheckIn, CheckInError, CheckInStatus, Monitor

if TYPE_CHECKING:
    from ..definition import Schedule
    from ..outcomes import RecordedOutcome
    from ..records import RunRecord

__all__ = [
    "ATTEMPTS",
    "BACKOFF_S",
    "DRAIN_SECONDS",
    "QUEUE_LIMIT",
    "MonitorFeed",
    "Monitors",
    "both",
    "check_monitors",
]

QUEUE_LIMIT = 10_000
DRAIN_SECONDS = 5.0
ATTEMPTS = 3
BACKOFF_S = (1.0, 3.0)
"""Pauses between attempts of one check-in (real time: this waits on a remote service)."""

_OF_STATUS = {
    RunStatus.SUCCEEDED: CheckInStatus.OK,
    RunStatus.FAILED: CheckInStatus.ERROR,
    RunStatus.MISSED: CheckInStatus.MISSED,
}
"""A terminal row's check-in. ``skipped`` has none: the slot stood down for a run of the same
schedule still in flight, whose own outcome is the check-in that answers for it — except a
slot skipped because its day is excluded (``error_tag="excluded"``), which checks in ``ok``:
the monitor's cron has no calendar and would otherwise call the holiday missed."""


class MonitorFeed:
    """One monitor's queue (:meth:`submit`, never blocks) and its sender (:meth:`run`)."""

    def __init__(
        self,
        monitor: Monitor,
        *,
        limit: int = QUEUE_LIMIT,
        backoff: Sequence[float] | None = None,
    ) -> None:
        self.monitor = monitor
        self.backoff = tuple(BACKOFF_S if backoff is None else backoff)
        self._send: MemoryObjectSendStream[CheckIn]
        self._receive: MemoryObjectReceiveStream[CheckIn]
        self._send, self._receive = anyio.create_memory_object_stream[CheckIn](limit)
        self.done = anyio.Event()
        self.sent = 0
        self.failed = 0
        self.dropped = 0

    def submit(self, check_in: CheckIn) -> None:
        """Queue ``check_in`` (from the event loop's thread)."""
        try:
            self._send.send_nowait(check_in)
        except anyio.WouldBlock:
            self.dropped += 1
            logger.warning(
                "schedule: monitor %s is behind — %d check-ins waiting; not sending %s for "
                "name=%s runId=%s (dropped so far: %d)",
                self.monitor.label,
                self._send.statistics().current_buffer_used,
                check_in.status.value,
                check_in.name,
                check_in.run_id,
                self.dropped,
                extra=_fields(check_in),
            )
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            logger.warning(
                "schedule: scheduler stopping — monitor %s not sent %s  name=%s runId=%s",
                self.monitor.label,
                check_in.status.value,
                check_in.name,
                check_in.run_id,
                extra=_fields(check_in),
            )

    def stop_accepting(self) -> None:
        self._send.close()

    @property
    def waiting(self) -> int:
        return self._receive.statistics().current_buffer_used

    async def run(self) -> None:
        """Send queued check-ins until the queue is closed and drained (or cancellation)."""
        try:
            async with self._receive:
                async for check_in in self._receive:
                    await self._deliver(check_in)
        finally:
            self.done.set()
            with anyio.CancelScope(shield=True), anyio.move_on_after(DRAIN_SECONDS):
                try:
                    await self.monitor.aclose()
                except Exception:
                    logger.exception("schedule: monitor %s failed to close", self.monitor.label)

    async def _deliver(self, check_in: CheckIn) -> None:
        label = self.monitor.label
        attempt = 0
        while True:
            attempt += 1
            try:
                await self.monitor.send(check_in)
            except CheckInError as exc:
                if exc.retry and attempt < ATTEMPTS:
                    await anyio.sleep(self.backoff[min(attempt, len(self.backoff)) - 1])
                    continue
                self.failed += 1
                # The message is the monitor's own, safe to log (no URL path, no token).
                logger.warning(
                    "schedule: monitor %s check-in not sent after %d attempt%s  status=%s "
                    "name=%s runId=%s: %s",
                    label,
                    attempt,
                    "" if attempt == 1 else "s",
                    check_in.status.value,
                    check_in.name,
                    check_in.run_id,
                    exc,
                    extra=_fields(check_in),
                )
                return
            except Exception:
                self.failed += 1
                logger.exception(
                    "schedule: monitor %s raised  status=%s name=%s runId=%s",
                    label,
                    check_in.status.value,
                    check_in.name,
                    check_in.run_id,
                    extra=_fields(check_in),
                )
                return
            self.sent += 1
            return


class Monitors:
    """The monitors of one running scheduler: fed at the store seam, each sending from a task
    of its own (:meth:`run`, in the scheduler's task group)."""

    def __init__(
        self,
        monitors: Sequence[Monitor],
        lookup: Callable[[str], Schedule | None],
        margin: timedelta,
        *,
        drain_seconds: float = DRAIN_SECONDS,
    ) -> None:
        self.feeds = [MonitorFeed(m) for m in monitors]
        self.lookup = lookup
        self.margin = margin
        self.drain_seconds = drain_seconds
        self._finished = anyio.Event()
        self._scope: anyio.CancelScope | None = None

    def started(self, runs: Sequence[RunRecord]) -> None:
        """``runs`` were just committed ``running`` by this process: their handlers start."""
        for run in runs:
            feeds = self._feeds_for(run.name, run.trigger)
            if not feeds:
                continue
            check_in = CheckIn(
                name=run.name,
                run_id=run.id,
                status=CheckInStatus.IN_PROGRESS,
                trigger=run.trigger,
                scheduled_at=run.scheduled_at,
                fired_at=run.fired_at,
                finished_at=None,
                schedule=self.lookup(run.name),
                margin=self.margin,
            )
            for feed in feeds:
                feed.submit(check_in)

    def recorded(self, outcome: RecordedOutcome) -> None:
        """``outcome``'s terminal row was just committed by this process."""
        status = _OF_STATUS.get(outcome.status)
        if outcome.status is RunStatus.SKIPPED and outcome.error_tag == EXCLUDED_TAG:
            status = CheckInStatus.OK
        if status is None:
            return
        feeds = self._feeds_for(outcome.name, outcome.trigger)
        if not feeds:
            return
        check_in = CheckIn(
            name=outcome.name,
            run_id=outcome.run_id,
            status=status,
            trigger=outcome.trigger,
            scheduled_at=outcome.scheduled_at,
            fired_at=outcome.fired_at,
            finished_at=outcome.finished_at,
            schedule=self.lookup(outcome.name),
            margin=self.margin,
            error_tag=outcome.error_tag,
            error_message=outcome.error_message,
        )
        for feed in feeds:
            feed.submit(check_in)

    def _feeds_for(self, name: str, trigger: Trigger) -> list[MonitorFeed]:
        return [
            feed
            for feed in self.feeds
            if trigger in feed.monitor.triggers and feed.monitor.watches(name)
        ]

    async def run(self) -> None:
        """Every monitor's sender, until :meth:`close` (then drained) or cancellation."""
        try:
            async with anyio.create_task_group() as tg:
                self._scope = tg.cancel_scope
                for feed in self.feeds:
                    tg.start_soon(feed.run)
        finally:
            self._finished.set()

    async def close(self) -> None:
        """Stop accepting check-ins; give the queued ones up to :attr:`drain_seconds` to be
        sent (the shutdown's own outcomes among them), then stop the senders."""
        for feed in self.feeds:
            feed.stop_accepting()
        with anyio.move_on_after(self.drain_seconds):
            for feed in self.feeds:
                await feed.done.wait()
        for feed in self.feeds:
            left = feed.waiting if not feed.done.is_set() else 0
            if left:
                logger.warning(
                    "schedule: monitor %s: %d check-ins not sent — still busy %.0f s after "
                    "shutdown",
                    feed.monitor.label,
                    left,
                    self.drain_seconds,
                )
        if self._scope is not None:
            self._scope.cancel()
            await self._finished.wait()


def check_monitors(monitors: Iterable[Monitor]) -> list[Monitor]:
    """``monitors`` as a list, each a :class:`Monitor`; a clear error otherwise."""
    if isinstance(monitors, Monitor):
        raise ConfigurationError(
            "Scheduling(monitors=...) takes a list of monitors — write monitors=[monitor]"
        )
    found = list(monitors)
    for monitor in found:
        if not isinstance(monitor, Monitor):
            raise ConfigurationError(
                "Scheduling(monitors=...) must hold monitors (SentryCronsMonitor(...), "
                f"HealthchecksMonitor(...) or a Monitor subclass), got {type(monitor).__name__}"
            )
    return found


def both(
    first: Callable[[RecordedOutcome], None] | None,
    second: Callable[[RecordedOutcome], None] | None,
) -> Callable[[RecordedOutcome], None] | None:
    """One callback calling ``first`` then ``second`` (either may be absent): the store
    seam's one ``on_recorded`` for the outcome hook and the monitors."""
    if first is None or second is None:
        return first or second

    def each(outcome: RecordedOutcome) -> None:
        first(outcome)
        second(outcome)

    return each


def _fields(check_in: CheckIn) -> dict[str, object]:
    return run_fields(
        check_in.name,
        check_in.run_id,
        iso_z(check_in.scheduled_at),
        trigger=check_in.trigger.value,
        check_in=check_in.status.value,
    )
