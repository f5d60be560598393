"""Helpers for testing schedules (see docs/testing.md).

* :class:`ManualClock` — a clock you move by hand;
* :func:`make_context` — the :class:`ScheduleContext` a handler gets, for ``await schedule(ctx)``;
* :func:`run_once` — one firing through the real runner (watchdog, ledger row) against an
  in-memory SQLite ledger, returning the recorded run;
* :func:`run_retries` — the same slot with every retry its ``RetryPolicy`` allows, the manual
  clock moved through each backoff: the final row and when each attempt started;
* :func:`scheduling_for` / :func:`wait_for_run` — a whole scheduler on a manual clock and an
  in-memory ledger (the ``voltro_scheduling`` pytest fixture is built on it).

::

    clock = ManualClock(datetime(2026, 3, 1, 9, 0, tzinfo=UTC))
    async with scheduling_for([daily_digest], clock=clock) as scheduling:
        await clock.advance(60)   # timers due within the minute fire
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import anyio

from .context import ScheduleContext, WorkflowStarter
from .enums import Trigger

if TYPE_CHECKING:
    from fastapi import FastAPI

    from .definition import Schedule
    from .scheduling import Scheduling
    from .store import RunRecord

__all__ = [
    "MEMORY_LEDGER_URL",
    "REAL_TIME_LIMIT",
    "ManualClock",
    "RealTimeLimitError",
    "RetriedRun",
    "make_context",
    "run_once",
    "run_retries",
    "scheduling_for",
    "wait_for_run",
    "wait_for_runs",
]

MEMORY_LEDGER_URL = "sqlite+aiosqlite:///:memory:"
"""An in-memory SQLite ledger: created at boot, gone at shutdown, no file."""

TEST_REPLICA_ID = "test-replica"


REAL_TIME_LIMIT = 30.0
"""Seconds of *real* time the helpers below wait for a handler and the ledger before they
give up (their ``timeout=``). The clock they run on is manual, but database I/O and the event
loop take real time, and a CI runner shared with other jobs can stretch a millisecond's write
to seconds: the bound is there to end a hang, not to time the work."""


class ManualClock:
    """A :class:`~fastapi_voltro_schedules.clock.Clock` that only moves when told to.

    ``sleep()`` parks the caller until :meth:`advance` (or :meth:`set`) moves time past its
    deadline. Stepping backwards is allowed — that is how tests simulate a wall-clock step.

    :meth:`monotonic` moves with :meth:`advance` only: :meth:`set` is a step of the wall clock
    (NTP, an operator), which elapsed time — and so every deadline — does not see. A running
    scheduler's timer holds such a step for :attr:`~.clock.SteadyClock.CONFIRM_SECONDS` of
    elapsed time before it takes it (slots come due in elapsed time meanwhile): to move a
    running scheduler to an instant, :meth:`advance` by the difference.
    """

    def __init__(self, start: datetime | None = None) -> None:
        start = start or datetime(2026, 1, 1, tzinfo=UTC)
        if start.tzinfo is None:
            raise ValueError("ManualClock needs an aware datetime")
        self._now = start.astimezone(UTC)
        self._monotonic = 0.0
        self._sleepers: list[tuple[datetime, int, anyio.Event]] = []
        self._seq = itertools.count()

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._monotonic

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await anyio.lowlevel.checkpoint()
            return
        event = anyio.Event()
        heapq.heappush(
            self._sleepers, (self._now + timedelta(seconds=seconds), next(self._seq), event)
        )
        await event.wait()

    def set(self, instant: datetime) -> None:
        """Jump to ``instant`` (forward or backward) and wake every sleeper now due.

        A step back wakes every sleeper (the Clock contract lets ``sleep()`` return early):
        a real sleep counts elapsed time, which the step does not touch, so a sleeper left
        parked until the wall clock caught up again would oversleep by the whole step."""
        instant = instant.astimezone(UTC)
        if instant < self._now:
            while self._sleepers:
                heapq.heappop(self._sleepers)[2].set()
        self._now = instant
        while self._sleepers and self._sleepers[0][0] <= self._now:
            heapq.heappop(self._sleepers)[2].set()

    async def advance(self, seconds: float = 0.0, *, settle: int = 20) -> None:
        """Move forward by ``seconds`` — wall and elapsed time both — and let woken tasks run
        (``settle`` scheduler passes)."""
        if seconds < 0:
            raise ValueError("advance() moves forward only; set() steps the wall clock back")
        self._monotonic += seconds
        self.set(self._now + timedelta(seconds=seconds))
        for _ in range(settle):
            await anyio.lowlevel.checkpoint()

    @property
    def sleepers(self) -> int:
        """How many tasks are parked in :meth:`sleep`."""
        return len(self._sleepers)


def _aware(value: datetime, what: str) -> datetime:
    if value.tzinfo is None:
        raise ValueError(
            f"{what}={value!r} is naive — pass an aware datetime, e.g. "
            "datetime(2026, 3, 2, 9, 0, tzinfo=ZoneInfo('Europe/Berlin'))"
        )
    return value.astimezone(UTC)


def make_context(
    schedule: Schedule,
    at: datetime | None = None,
    *,
    trigger: Trigger | str = Trigger.SELF,
    app: FastAPI | None = None,
    workflows: WorkflowStarter | None = None,
    clock: ManualClock | None = None,
    run_id: str = "sr_test",
) -> ScheduleContext:
    """The context the runner would hand ``schedule``'s handler for the slot ``at``.

    ``at`` is the slot (aware; stored as UTC); unset, it is the newest occurrence at or before
    the clock's now. ``fired_at`` is ``clock.now()`` when a ``clock`` is given (so a test can
    make a run late), else ``at``; the deadline is ``fired_at`` + ``max_runtime_ms``. Nothing
    is recorded: ``await schedule(make_context(schedule, at=...))`` just runs the handler.
    """
    now = clock.now() if clock is not None else None
    if at is None:
        reference = now if now is not None else ManualClock().now()
        slot = schedule.previous_occurrence(reference)
        if slot is None:
            raise ValueError(
                f'schedule "{schedule.name}" has no occurrence at or before {reference} — '
                "pass at=<an aware datetime>"
            )
    else:
        slot = _aware(at, "at")
    fired_at = now if now is not None else slot
    return ScheduleContext(
        scheduled_at=slot,
        fired_at=fired_at,
        run_id=run_id,
        trigger=Trigger(trigger),
        deadline=fired_at + schedule.max_runtime,
        schedule=schedule,
        app=app,
        workflows=workflows,
    )


@asynccontextmanager
async def scheduling_for(
    schedules: Iterable[Schedule],
    *,
    clock: ManualClock | None = None,
    app: FastAPI | None = None,
    arm: bool = True,
    **config: Any,
) -> AsyncIterator[Scheduling]:
    """A running :class:`Scheduling` of ``schedules`` on a :class:`ManualClock` (``clock``, or
    one at 2026-01-01 UTC, as ``scheduling.clock``) and an in-memory SQLite ledger.

    ``config`` are :class:`SchedulingConfig` fields (``database_url`` defaults to the in-memory
    ledger, ``replica_id`` to ``"test-replica"``), and ``workflows=`` / ``handlers=`` (the
    ``define_handler`` units run-time schedules may name) as ``Scheduling`` takes them.
    ``arm=False`` arms no timer: only ``fire_now`` runs anything. With ``app``, its
    ``state.scheduling``/``state.workflows`` are put back as they were on exit.
    """
    from .config import SchedulingConfig
    from .scheduling import Scheduling

    settings: dict[str, Any] = {"database_url": MEMORY_LEDGER_URL, "replica_id": TEST_REPLICA_ID}
    settings.update(config)
    workflows = settings.pop("workflows", None)
    handlers = settings.pop("handlers", ())
    scheduling = Scheduling(
        schedules,
        config=SchedulingConfig(**settings),
        clock=clock if clock is not None else ManualClock(),
        workflows=workflows,
        handlers=handlers,
    )
    saved = {k: getattr(app.state, k, None) for k in ("scheduling", "workflows")} if app else {}
    try:
        async with scheduling.run(app, arm=arm):
            yield scheduling
    finally:
        if app is not None:
            for key, value in saved.items():
                setattr(app.state, key, value)


async def wait_for_run(
    scheduling: Scheduling, run_id: str, *, timeout: float = REAL_TIME_LIMIT
) -> RunRecord:
    """Wait (real time, polling the ledger) until run ``run_id`` is terminal; return its row.

    The clock is manual, but the handler and the ledger still take real time. Raises
    ``TimeoutError`` naming the run and its last status after ``timeout`` seconds.
    """
    store = scheduling.store
    if store is None:
        raise RuntimeError("the scheduling is not running — call this inside scheduling_for()")
    last: RunRecord | None = None
    with anyio.move_on_after(timeout):
        while True:
            last = await store.get_run(run_id)
            if last is not None and last.status.terminal:
                return last
            await anyio.sleep(0.002)
    status = "absent" if last is None else last.status.value
    raise TimeoutError(f"run {run_id} is still {status} after {timeout} s")


async def wait_for_runs(
    scheduling: Scheduling, name: str, count: int = 1, *, timeout: float = REAL_TIME_LIMIT
) -> list[RunRecord]:
    """Wait until schedule ``name`` has at least ``count`` runs and all of them are terminal;
    return them oldest slot first. ``TimeoutError`` (with what is there) after ``timeout``."""
    store = scheduling.store
    if store is None:
        raise RuntimeError("the scheduling is not running — call this inside scheduling_for()")
    runs: list[RunRecord] = []
    with anyio.move_on_after(timeout):
        while True:
            runs = sorted(await store.list_runs(name, limit=1000), key=lambda r: r.scheduled_at)
            if len(runs) >= count and all(r.status.terminal for r in runs):
                return runs
            await anyio.sleep(0.002)
    seen = ", ".join(f"{r.scheduled_at.isoformat()} {r.status.value}" for r in runs) or "none"
    raise TimeoutError(
        f'schedule "{name}": wanted {count} finished run(s) after {timeout} s, have: {seen}'
    )


async def run_once(
    schedule: Schedule,
    at: datetime | None = None,
    *,
    app: FastAPI | None = None,
    workflows: WorkflowStarter | None = None,
    elapse: float = 0.0,
    timeout: float = REAL_TIME_LIMIT,
) -> RunRecord:
    """Run the firing of ``schedule`` for slot ``at`` through the real runner; return its row.

    ``at`` must be an occurrence of the cron (default: the first one after 2026-01-01 UTC).
    A scheduler on an in-memory SQLite ledger and a :class:`ManualClock` at ``at`` runs that
    one slot the way an operator's backfill does (``Scheduling.backfill``: recorded with
    ``trigger="manual"`` and ``scheduled_at`` = ``at``): the handler runs under its watchdog
    and heartbeat, and the returned row says how it ended — ``status``, ``error_tag`` (the
    exception's class name, or ``"timeout"``) and ``error_message``. A schedule with a
    ``RetryPolicy`` runs every attempt its slot takes (the clock is moved through each backoff,
    see :func:`run_retries`): the row is the slot's final one, ``attempt`` saying how many ran.

    ``elapse`` moves the manual clock that many seconds once the handler has started: past the
    schedule's ``max_runtime_ms`` the watchdog ends a handler still running (``failed`` /
    ``timeout``) without a real wait. ``timeout`` bounds the real wait: past it,
    :class:`RealTimeLimitError` (a ``TimeoutError``) naming the limit and how to raise it.
    """
    ran = await _run_slot(schedule, at, app, workflows, elapse, timeout, "run_once")
    return ran.run


@dataclass(frozen=True, slots=True)
class RetriedRun:
    """What :func:`run_retries` saw of one slot: its final row and when each attempt started."""

    run: RunRecord
    """The slot's final row (``attempt``: how many attempts ran)."""
    started: list[datetime]
    """When each attempt started, on the manual clock: the slot, then each retry's due time
    (the previous failure plus its backoff)."""

    @property
    def waits(self) -> list[timedelta]:
        """The gaps between consecutive attempts' starts (each failure's backoff, plus the
        attempt's own run time on the manual clock — zero unless it moved the clock)."""
        return [b - a for a, b in zip(self.started, self.started[1:], strict=False)]


async def run_retries(
    schedule: Schedule,
    at: datetime | None = None,
    *,
    app: FastAPI | None = None,
    workflows: WorkflowStarter | None = None,
    timeout: float = REAL_TIME_LIMIT,
) -> RetriedRun:
    """Run slot ``at`` of ``schedule`` with every retry its ``RetryPolicy`` allows, moving the
    manual clock to each retry's due time (no real wait), and return what happened::

        ran = await run_retries(sync_orders, at=datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
        assert ran.run.status is RunStatus.SUCCEEDED and ran.run.attempt == 3
        assert ran.waits == [timedelta(seconds=1), timedelta(seconds=2)]

    The slot runs as :func:`run_once` runs it (a backfill of that slot on an in-memory ledger,
    the clock at ``at``), so the window rule holds as in production: no attempt starts once
    the schedule's next slot is due — the last failure is then final with ``error_tag=
    "retry-window-closed"``. ``timeout`` bounds the real wait (:class:`RealTimeLimitError`)."""
    return await _run_slot(schedule, at, app, workflows, 0.0, timeout, "run_retries")


class RealTimeLimitError(TimeoutError):
    """A testing helper's real-time limit (its ``timeout=``, default :data:`REAL_TIME_LIMIT`)
    ran out before the run ended: the manual clock does not move real I/O."""

    def __init__(self, message: str, *, limit: float) -> None:
        super().__init__(message)
        self.limit = limit


def _slot_of(schedule: Schedule, at: datetime | None) -> datetime:
    if at is None:
        return schedule.next_occurrence(ManualClock().now())
    slot = _aware(at, "at")
    previous = schedule.previous_occurrence(slot)
    if previous != slot:
        nearest = schedule.next_occurrence(slot)
        before = "none" if previous is None else previous.isoformat()
        raise ValueError(
            f'at={slot.isoformat()} is not an occurrence of schedule "{schedule.name}" '
            f'(cron "{schedule.cron}" in {schedule.timezone}) — the nearest are '
            f"{before} and {nearest.isoformat()}"
        )
    return slot


async def _run_slot(
    schedule: Schedule,
    at: datetime | None,
    app: FastAPI | None,
    workflows: WorkflowStarter | None,
    elapse: float,
    timeout: float,
    helper: str,
) -> RetriedRun:
    slot = _slot_of(schedule, at)
    clock = ManualClock(slot)
    started: dict[int, datetime] = {}
    async with scheduling_for(
        [schedule], clock=clock, app=app, arm=False, workflows=workflows
    ) as scheduling:
        store = scheduling.store
        assert store is not None  # running
        with anyio.move_on_after(timeout) as bound:
            async with anyio.create_task_group() as tg:
                tg.start_soon(
                    scheduling.backfill, schedule.name, slot - timedelta(microseconds=1), slot
                )
                while True:
                    rows = await store.list_runs(schedule.name, limit=1)
                    if rows:
                        break
                    await anyio.sleep(0.002)
                if elapse:
                    await clock.advance(elapse)
                while True:
                    (row,) = await store.list_runs(schedule.name, limit=1)
                    # the clock moves only below, so "now" when an attempt is first seen is
                    # when it started
                    started.setdefault(row.attempt, clock.now())
                    if row.terminal:
                        break
                    if row.retry_at is not None and row.retry_at > clock.now():
                        await clock.advance((row.retry_at - clock.now()).total_seconds())
                    await anyio.sleep(0.002)
        if bound.cancelled_caught:
            raise RealTimeLimitError(
                f'{helper}("{schedule.name}"): the run had not finished after {timeout} s of '
                f"real time ({helper}'s timeout=; the manual clock does not move it) — a "
                "handler that waits on real I/O needs a larger timeout, one that waits on time "
                "needs elapse= past its max_runtime_ms",
                limit=timeout,
            )
        (run,) = await store.list_runs(schedule.name, limit=2)
        return RetriedRun(run, [started[k] for k in sorted(started)])
