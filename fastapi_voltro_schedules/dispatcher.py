"""The dispatcher: the one door every firing comes in through, and the runner behind it.

Everything that fires calls :meth:`Dispatcher.fire` with a :class:`FireRequest` — schedule,
slot, and *why* it fires (:class:`Why`: the timer, a catch-up, a resumed queued row, an
external arrival, the in-app fallback, Run now, a range step) — or, for the timer's instant, a
:class:`Due` batch of the same requests. Why a firing comes decides its trigger and how it is
admitted; every request then passes the same admission (:class:`.coordination.Admitter`: pause,
gate, overlap rule) and is carried out by the same runner. Nothing that fires is imported here:
callers build a request and hand it over (the timer, catch-up, the cluster membership's
takeovers through the engine, the arrivals, Run now, the range backfill).

:meth:`Dispatcher.record_missed` is the one other way in, and it fires nothing: slots a
catch-up (or the timer, for a schedule that fell behind) writes off are recorded ``missed``,
many schedules in one write.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, overload

import anyio
from anyio.abc import TaskGroup

from .clock import iso_z
from .coordination import Admission, Verdict
from .enums import (
    BackfillPolicy,
    Coordination,
    CoordinationOutcome,
    OverlapPolicy,
    RunStatus,
    Trigger,
)
from .errors import RunNowBusyError, SchedulerShuttingDownError, StoreUnavailableError
from .fire_requests import Due, FireRequest, Why
from .ledger import excluded_reasons, record_missed_many
from .logs import logger
from .planning import plan_fall_behind
from .store import new_run_id

if TYPE_CHECKING:
    from .clock import Clock
    from .coordination import Admitter, InFlight, Wakeups
    from .definition import Schedule
    from .runner import Runner
    from .store import RunOutcome, RunRecord, Store

MANUAL_RETRY_BUDGET_S = 15.0
"""How long a range step's failed insert is retried before the range stops."""
MANUAL_BACKOFF_S = (0.25, 0.5, 1.0, 2.0)
"""Pauses between those attempts (the last repeats); real time, it waits on the database."""


@dataclass(slots=True)
class _Final:
    """A slot's final status, awaited by the firing that ran its first attempt."""

    status: RunStatus | None = None
    done: anyio.Event = field(default_factory=anyio.Event)

    async def wait(self) -> RunStatus | None:
        await self.done.wait()
        return self.status


@dataclass(slots=True)
class Firing:
    """A submitted firing: its admission now, its outcome when :meth:`finished`."""

    admission: Admission
    status: RunStatus | None = None
    done: anyio.Event = field(default_factory=anyio.Event)

    async def finished(self) -> RunStatus | None:
        """The recorded status of the firing's own run (``None``: it did not run)."""
        await self.done.wait()
        return self.status


class Dispatcher:
    def __init__(
        self,
        *,
        admitter: Admitter,
        runner: Runner,
        inflight: InFlight,
        wakeups: Wakeups,
        store: Store,
        clock: Clock,
        coordination: Coordination,
        replica_id: str,
    ) -> None:
        self.admitter = admitter
        self.runner = runner
        self.inflight = inflight
        self.wakeups = wakeups
        self.store = store
        self.clock = clock
        self.coordination = coordination
        self.replica_id = replica_id
        self._runs: TaskGroup | None = None
        self.closing = False
        """Shutdown began: nothing new is admitted (see :meth:`admit`)."""
        self.quiet: Callable[[], None] | None = None
        """Told when a herd's handlers have all started (the engine's garbage-collection
        pacing, see :mod:`.gcpacing`)."""
        self.settled: Callable[[], None] | None = None
        """Told when a herd's outcomes are all written (the engine folds the SQLite log)."""
        self._manual: dict[str, str | None] = {}
        """Per schedule, the Run now in flight here (its run id; ``None`` while admitting)."""
        self._finals: dict[str, _Final] = {}
        """Per run with a retry pending here: its slot's final status, once known (a firing
        carried out alone returns it, see :meth:`_execute`)."""
        runner.on_retry = self._retry_later

    def bind(self, runs: TaskGroup | None) -> None:
        """The task group background runs live in (the engine's; ``None`` when stopped)."""
        self._runs = runs

    @property
    def running_background(self) -> bool:
        """Whether :meth:`spawn` starts anything (the engine runs and is not stopping)."""
        return self._runs is not None and not self.closing

    def spawn(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        if self._runs is not None:
            self._runs.start_soon(fn, *args)

    # -- the door ---------------------------------------------------------------------------

    @overload
    async def fire(self, request: FireRequest) -> Firing: ...
    @overload
    async def fire(self, request: Due) -> None: ...

    async def fire(self, request: FireRequest | Due) -> Firing | None:
        """The one door. A :class:`FireRequest` returns its :class:`Firing` as soon as the
        firing's row exists (``running``, ``queued`` or ``skipped``; the run, or its wait in
        line, goes on in the background — ``await firing.finished()`` for its outcome), except
        a :attr:`Why.RANGE` step, which returns once it has run. A :class:`Due` (the timer's
        instant) returns once its written-off slots and the herd's outcomes are written; a
        line (``queue``, or owed ``all`` slots) runs on in the background.

        Raises :class:`SchedulerShuttingDownError` for a request from outside (an arrival, Run
        now, a range step) once shutdown began or when no background runs are possible, and
        :class:`RunNowBusyError` for a second Run now of a schedule in flight here."""
        if isinstance(request, Due):
            await self._fire_due(request)
            return None
        why = request.why
        if why is Why.RUN_NOW:
            return await self._run_now(request.schedule, request.slot)
        if why is Why.RANGE:
            return await self._run_range_step(request.schedule, request.slot, request.claim)
        if why is Why.RESUME:
            assert request.row is not None, "a resumed firing names its queued row"
            return await self._resume(request.schedule, request.row)
        if why is Why.RETRY:
            assert request.row is not None, "a retry names its slot's running row"
            return await self._retry(request.schedule, request.row)
        if why is Why.FOLLOW:
            assert request.row is not None, "a followed job names its slot's running row"
            return await self._follow(request.schedule, request.row)
        schedule = request.schedule
        owed = why is Why.CATCH_UP and schedule.backfill is BackfillPolicy.ALL
        return await self._submit(
            schedule, request.slot, request.trigger, fallback=why is Why.FALLBACK, owed=owed
        )

    # -- admission and carrying out ------------------------------------------------------------

    async def _admit(
        self,
        schedule: Schedule,
        slot: datetime,
        trigger: Trigger,
        run_id: str | None = None,
        *,
        fallback: bool = False,
        owed: bool = False,
        claim: str | None = None,
    ) -> Admission:
        """Admission only (the row is written; nothing is started): :meth:`_carry` runs it.

        Once shutdown began nothing is admitted: a ``running`` row written now would have no
        handler behind it. An external arrival, Run now or range step is refused with
        :class:`SchedulerShuttingDownError` (503: the caller retries, on another replica); a
        clock-driven slot is left to the next process's catch-up."""
        if self.closing:
            if trigger is Trigger.SELF:
                return Admission(Verdict.UNAVAILABLE)
            raise SchedulerShuttingDownError(
                f'the scheduler is shutting down — "{schedule.name}" was not fired and nothing '
                "was recorded; retry (another replica, or this one once it is back)"
            )
        return await self.admitter.admit(
            schedule, slot, trigger, run_id, fallback=fallback, owed=owed, claim=claim
        )

    async def _submit(
        self,
        schedule: Schedule,
        slot: datetime,
        trigger: Trigger,
        *,
        fallback: bool = False,
        owed: bool = False,
    ) -> Firing:
        """Admit one slot; carry it out in the background. ``fallback``, ``owed``: see
        :meth:`Admitter.admit`."""
        self._can_spawn(schedule)
        admission = await self._admit(schedule, slot, trigger, fallback=fallback, owed=owed)
        return self._carry_on(schedule, Firing(admission))

    async def _resume(self, schedule: Schedule, orphan: RunRecord) -> Firing:
        """Put a stopped replica's silent ``queued`` row — a slot still owed — back in its
        line and carry it out in the background (see :meth:`Admitter.resume`)."""
        self._can_spawn(schedule)
        if self.closing:  # a row taken over now would have no handler behind it
            return self._carry_on(schedule, Firing(Admission(Verdict.UNAVAILABLE)))
        return self._carry_on(schedule, Firing(await self.admitter.resume(schedule, orphan)))

    async def _follow(self, schedule: Schedule, orphan: RunRecord) -> Firing:
        """Take a stopped replica's silent row naming a handed-off job over (see
        :meth:`Admitter.take_over_job`) and run its firing again here in the background: the
        same job id is enqueued (a no-op when the job exists) and followed to its end."""
        self._can_spawn(schedule)
        if self.closing:  # a row taken over now would have nobody following its job
            return self._carry_on(schedule, Firing(Admission(Verdict.UNAVAILABLE)))
        return self._carry_on(schedule, Firing(await self.admitter.take_over_job(schedule, orphan)))

    def _can_spawn(self, schedule: Schedule) -> None:
        if self._runs is None and not self.closing:
            # No task group to run it in (armed=False, or stopped): a row written now would
            # never get its handler.
            raise SchedulerShuttingDownError(
                f'the scheduler runs no background firings now — "{schedule.name}" was not fired'
            )

    def _carry_on(self, schedule: Schedule, firing: Firing) -> Firing:
        if firing.admission.verdict in (Verdict.RUN, Verdict.QUEUED):
            self.spawn(self._carry_into, schedule, firing)
        else:
            firing.done.set()
        return firing

    async def _carry_into(self, schedule: Schedule, firing: Firing) -> None:
        try:
            firing.status = await self._carry(schedule, firing.admission)
        finally:
            firing.done.set()

    async def _carry(self, schedule: Schedule, admission: Admission) -> RunStatus | None:
        """Carry an admission out: run it, or wait in line (running any occurrence adopted on
        the way first) and then run it. Returns the firing's own run's status."""
        if admission.verdict is Verdict.RUN and admission.run is not None:
            return await self._execute(schedule, admission.run)
        turn = admission.turn
        if admission.verdict is not Verdict.QUEUED or turn is None:
            return None
        try:
            while True:
                step = await turn.next()
                if step is None:
                    return None
                status = await self._execute(schedule, step.run)
                if not step.adopted:
                    return status
        finally:
            turn.close()

    # -- the timer's instant ---------------------------------------------------------------

    async def _fire_due(self, due: Due) -> None:
        """Many schedules at once: the timer's instant, or a takeover's catch-up. At the
        timer's instant a schedule that fell behind (several slots) follows its ``backfill``
        policy (``planning.plan_fall_behind``): the slots it writes off are recorded
        ``missed`` for every such schedule in one write, and what it still fires is a request
        like any other (a catch-up's slots come planned, its written-off ones recorded). One
        slot of a schedule without a line joins the herd; a line (``queue``, or owed ``all``
        slots) is carried out beside it, in the background."""
        timer = due.why is Why.TIMER
        herd: list[Schedule] = []
        herd_slots: list[datetime] = []
        missed: list[tuple[Schedule, list[datetime]]] = []
        for schedule, slots in zip(due.schedules, due.slots, strict=True):
            if timer and len(slots) > 1:
                plan = plan_fall_behind(slots, schedule.backfill)
                if plan.missed:
                    missed.append((schedule, plan.missed))
                slots = plan.fire
            # a catch-up slot of an `all` schedule is owed (see fire): it joins the line
            owed = schedule.backfill is BackfillPolicy.ALL and (len(slots) > 1 or not timer)
            if len(slots) == 1 and not owed and schedule.on_overlap is not OverlapPolicy.QUEUE:
                herd.append(schedule)
                herd_slots.append(slots[0])
            elif slots:
                self.spawn(self._fire_line, schedule, slots, owed)
        del due  # the instant as the timer handed it is no longer needed
        if missed:
            # 10,000 schedules falling behind together (a slow boot, a stalled host) are one
            # write, not 10,000 transactions queued ahead of the herd
            await self.record_missed(missed, Trigger.SELF)
        if herd:
            await self._fire_herd(herd, herd_slots)

    async def _fire_herd(self, schedules: list[Schedule], slots: list[datetime]) -> None:
        """The herd: many schedules due at one instant (``schedules[i]`` at ``slots[i]``),
        admitted together — one claim statement per 1,000 keys, one overlap read, one insert
        — then started in one pass.

        Admitting in chunks (starting the first handlers while later rows are written) was
        measured and lost: on SQLite the driver thread's per-row GIL handoffs stall while the
        loop starts tasks, and on Postgres the extra round trips cost more than they overlap.
        """
        admitted = await self.admitter.admit_many(schedules, slots)
        del schedules, slots  # the herd as the timer handed it is no longer needed
        await self.runner.execute_many(
            admitted.starting, admitted.runs, self._handler_done, self._recorded, self.quiet
        )
        if self.settled is not None:
            self.settled()

    async def _fire_line(self, schedule: Schedule, slots: list[datetime], owed: bool) -> None:
        """The slots one schedule still fires at this instant join its line at once, oldest
        first: a ``queue`` schedule's, or the ``owed`` slots of an ``all`` schedule that fell
        behind or is caught up (each with its own row, see catchup.start_plans). A slot due
        while they wait queues behind them, as the line orders by scheduled_at."""
        firings = [await self._submit(schedule, slot, Trigger.SELF, owed=owed) for slot in slots]
        for firing in firings:
            await firing.finished()

    # -- operator firings ----------------------------------------------------------------------

    async def _run_now(self, schedule: Schedule, at: datetime) -> Firing:
        """Run now: ``trigger="manual"``, no coordination, no overlap rule — but at most one
        Run now of a schedule in flight per process (:class:`RunNowBusyError` beyond: a
        double-click, or a script in a loop, must not start handlers without bound).
        Returns once the run row exists (``firing.admission.run``); the handler runs in the
        background."""
        if schedule.name in self._manual:
            raise RunNowBusyError(schedule.name, self._manual[schedule.name])
        self._manual[schedule.name] = None
        try:
            firing = await self._submit(schedule, at, Trigger.MANUAL)
        except BaseException:
            del self._manual[schedule.name]
            raise
        run = firing.admission.run
        if run is None:
            del self._manual[schedule.name]
            raise StoreUnavailableError(
                f'could not record a Run now of "{schedule.name}" — the ledger is unreachable'
            )
        self._manual[schedule.name] = run.id
        self.spawn(self._release_manual, schedule.name, firing)
        return firing

    async def _release_manual(self, name: str, firing: Firing) -> None:
        try:
            await firing.finished()
        finally:
            self._manual.pop(name, None)

    async def _run_range_step(
        self, schedule: Schedule, slot: datetime, claim: str | None = None
    ) -> Firing:
        """Run one slot as an operator instruction (``trigger="manual"``) and wait for it;
        the range backfill's step, run in the caller's task (a backfill that stops stops it).
        With ``claim`` it runs only if it wins that key (with its row, one transaction): a
        step that lost it returns at once, not run (``status`` ``None``).

        A failed insert is retried with the same run id for :data:`MANUAL_RETRY_BUDGET_S`
        (one blip must not abort a range); a row found under that id is the insert that landed
        unanswered, and runs as it is — never a second row for the slot."""
        run_id = new_run_id()
        give_up = anyio.current_time() + MANUAL_RETRY_BUDGET_S
        attempt = 0
        while True:
            admission = await self._admit(schedule, slot, Trigger.MANUAL, run_id, claim=claim)
            if admission.run is not None:
                break
            if admission.verdict is Verdict.LOST:
                # Another process won the claim — unless it was this step's own earlier insert,
                # which landed unanswered (its claim went with its row).
                landed = await self.store.get_run(run_id) if attempt else None
                if landed is None or landed.status is not RunStatus.RUNNING:
                    lost = Firing(admission)
                    lost.done.set()
                    return lost
                self.inflight.add(landed)
                admission = Admission(Verdict.RUN, landed)
                break
            pause = MANUAL_BACKOFF_S[min(attempt, len(MANUAL_BACKOFF_S) - 1)]
            if anyio.current_time() + pause > give_up:
                raise StoreUnavailableError(
                    f'could not record the manual run of "{schedule.name}" at {iso_z(slot)}'
                    f" — the ledger is unreachable (retried {attempt} times)"
                )
            attempt += 1
            await anyio.sleep(pause)
            try:
                landed = await self.store.get_run(run_id)
            except StoreUnavailableError:
                continue
            if landed is not None and landed.status is RunStatus.RUNNING:
                self.inflight.add(landed)
                admission = Admission(Verdict.RUN, landed)
                break
        firing = Firing(admission)
        try:
            firing.status = await self._carry(schedule, admission)
        finally:
            firing.done.set()
        # an admitted manual firing is always RUN; its status is None only when the slot's
        # pending retry was taken over by another replica (RetryPolicy)
        return firing

    # -- writing off -------------------------------------------------------------------------

    async def record_missed(
        self, missed: Sequence[tuple[Schedule, list[datetime]]], trigger: Trigger
    ) -> None:
        """Record slots nobody ran as ``missed`` (once across replicas under advisoryLock),
        for every schedule of ``missed`` at once: one claim statement per 1,000 keys and one
        insert (a boot's catch-up of 10,000 schedules is one write, not 10,000)."""
        missed = [(schedule, slots) for schedule, slots in missed if slots]
        if not missed:
            return
        single = self.coordination is Coordination.SINGLE
        outcome = CoordinationOutcome.SINGLE if single else CoordinationOutcome.WON_LOCK
        fence = self.admitter.fence
        try:
            # a written-off slot on an excluded day is recorded skipped, with its reason
            excluded = excluded_reasons(missed)
            if fence is not None and trigger is Trigger.SELF:
                # cluster: the owner records them, through each schedule's lease fence
                now = self.clock.now()
                recorded = {
                    s.name: await fence.record_missed(s, slots, now, excluded)
                    for s, slots in missed
                }
            else:
                recorded = await record_missed_many(
                    self.store,
                    {schedule.name: slots for schedule, slots in missed},
                    trigger,
                    outcome,
                    replica_id=self.replica_id,
                    now=self.clock.now(),
                    claim=not single,
                    excluded=excluded,
                )
        except StoreUnavailableError as exc:
            logger.warning(
                "schedule: could not record %d missed slots  name=%s%s: %s",
                sum(len(slots) for _, slots in missed),
                missed[0][0].name,
                f" (and {len(missed) - 1} more schedules)" if len(missed) > 1 else "",
                exc,
            )
            return
        for name, slots in recorded.items():
            if slots:
                logger.info(
                    "schedule: missed  name=%s slots=%d first=%s last=%s",
                    name,
                    len(slots),
                    iso_z(slots[0]),
                    iso_z(slots[-1]),
                )

    # -- running --------------------------------------------------------------------------

    async def _execute(self, schedule: Schedule, run: RunRecord) -> RunStatus | None:
        """Run an admitted run (its row is ``running``) and record its outcome. A failure
        retried within its slot (``RetryPolicy``) is not its outcome: this returns the slot's
        final status once its last attempt is recorded (``None``: another replica took the
        pending retry over, or this one stopped)."""
        if run.id not in self.inflight.runs[run.name]:
            self.inflight.add(run)  # a turn taken in line, or an adopted occurrence
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self._handler_done(schedule, run)

        try:
            status = await self.runner.execute(schedule, run, lambda *_: release(), self._recorded)
        finally:
            release()
            self.inflight.finishing.discard(run.id)
            self._changed(run.name)
        if status is not RunStatus.RUNNING:
            return status
        final = self._finals.get(run.id)  # the retry is pending (see _retry_later)
        return None if final is None else await final.wait()

    # -- retries within the slot ----------------------------------------------------------

    def _retry_later(self, schedule: Schedule, row: RunRecord) -> None:
        """The runner wrote a failed attempt's pending retry (``row`` as it now reads): the
        slot stays held here, and its next attempt comes through the door (:attr:`Why.RETRY`).
        Shutting down, nothing is started: the pending retry stays in the ledger, and another
        replica takes it over once this one stops beating it."""
        if not self.running_background:
            return
        self._hold_retry(row)
        self.spawn(self.fire, FireRequest(schedule, row.scheduled_at, Why.RETRY, row))

    def _hold_retry(self, row: RunRecord) -> None:
        # The pending retry holds its schedule as the attempt it follows did (skip, the
        # in-process line), and is none of the reaper's business here.
        self.inflight.finishing.discard(row.id)
        if row.id not in self.inflight.runs[row.name]:
            self.inflight.add(row)
        self.inflight.retrying.add(row.id)
        self._finals.setdefault(row.id, _Final())

    def _release_retry(self, row: RunRecord) -> None:
        self.inflight.retrying.discard(row.id)
        self.inflight.remove(row)
        self._changed(row.name)

    def _settle(self, run_id: str, status: RunStatus | None) -> None:
        final = self._finals.pop(run_id, None)
        if final is not None:
            final.status = status
            final.done.set()

    async def _retry(self, schedule: Schedule, row: RunRecord) -> Firing:
        """A pending retry — this replica's (from :meth:`_retry_later`), or a stopped
        replica's (taken over first, see :meth:`Admitter.take_over_retry`). Returns at once;
        the wait for ``retry_at`` (the row beating meanwhile), the decision
        (:meth:`Admitter.retry`) and the attempt go on in the background: ``await
        firing.finished()`` for the slot's final status."""
        self._can_spawn(schedule)
        if row.id not in self.inflight.retrying:
            # not held here: a stopped replica's (maybe this one's, restarted under the same
            # replica id) — taken over on the beat judged silent before anything else
            if self.closing:
                return self._carry_on(schedule, Firing(Admission(Verdict.UNAVAILABLE)))
            taken = await self.admitter.take_over_retry(schedule, row)
            if taken.run is None:
                return self._carry_on(schedule, Firing(taken))
            row = taken.run
            self._hold_retry(row)
        firing = Firing(Admission(Verdict.QUEUED, row))
        self.spawn(self._carry_retry, schedule, row, firing)
        return firing

    async def _carry_retry(self, schedule: Schedule, row: RunRecord, firing: Firing) -> None:
        watchdog = self.runner.watchdog
        watched = watchdog.keep_alive(row.id)
        status: RunStatus | None = None
        started = False
        try:
            try:
                assert row.retry_at is not None, "a pending retry names when it is due"
                await self._until(row.retry_at)
                if self.closing:  # the attempt would have no time to run: left pending
                    admission = Admission(Verdict.UNAVAILABLE)
                else:
                    admission = await self.admitter.retry(schedule, row)
            finally:
                watchdog.unwatch(watched)
            firing.admission = admission
            if admission.verdict is Verdict.RUN and admission.run is not None:
                started = True
                self.inflight.retrying.discard(row.id)
                status = await self._execute(schedule, admission.run)
            elif admission.verdict is Verdict.ENDED:
                status = RunStatus.FAILED
        finally:
            if not started:
                self._release_retry(row)
            self._settle(row.id, status)
            firing.status = status
            firing.done.set()

    async def _until(self, instant: datetime) -> None:
        """Sleep on the scheduler's clock until ``instant`` (a wall clock stepped back, or a
        sleep woken early, sleeps again)."""
        while True:
            left = (instant - self.clock.now()).total_seconds()
            if left <= 0:
                return
            await self.clock.sleep(left)

    def _handler_done(self, schedule: Schedule, run: RunRecord) -> None:
        # The overlap rule looks at handlers, not at pending writes: from here the run no
        # longer holds its schedule, and a row read `running` meanwhile is not a live run.
        self.inflight.finishing.add(run.id)
        self.inflight.remove(run)

    def _recorded(self, outcomes: Sequence[RunOutcome]) -> None:
        for outcome in outcomes:
            self.inflight.finishing.discard(outcome.run_id)

    def _changed(self, name: str) -> None:
        """The schedule's ledger changed (a terminal write): waiters here look again now.
        Other replicas' hear of it from the write itself under cdc (``Ledger.announce``)."""
        self.wakeups.notify(name)
