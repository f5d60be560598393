"""The self-trigger engine: one supervisor task over a heap of next instants.

10,000 schedules are one task and one heap, not 10,000 sleeping tasks. Each schedule keeps
``last_planned`` — the newest slot it has accounted for (fired, skipped or recorded missed).
On every wake the slots in ``(last_planned, now]`` are due; more than one means the process
fell behind (busy loop, wall-clock step, suspended VM) and the backfill policy decides. Because
the next instant is always derived from ``last_planned`` and never from a sleep's length, a
clock stepping back never fires a slot twice and a clock stepping forward never loses one
silently.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskGroup, TaskStatus

from .clock import iso_z
from .enums import (
    Coordination,
    CoordinationOutcome,
    OverlapPolicy,
    RunStatus,
    Trigger,
)
from .errors import StoreUnavailableError
from .ledger import new_row, record_missed_slots
from .logs import logger
from .models import claim_key
from .pauses import NO_PAUSES, PauseView
from .planning import (
    CatchUpPlan,
    is_live,
    last_seen,
    passed_slots,
    plan_boot_backfill,
    plan_fall_behind,
)
from .runner import Runner
from .store import RunOutcome, RunRecord, new_run_ids

if TYPE_CHECKING:
    from .clock import Clock
    from .definition import Schedule
    from .store import Store

MAX_SLEEP_SECONDS = 30.0
"""Longest single sleep: every wait is re-evaluated against the wall clock at least this often."""

BOOT_GRACE = timedelta(seconds=2)
"""Slots this recent at boot are the live timer's, not the boot backfill's."""

RETENTION_INTERVAL_SECONDS = 600.0
RETENTION_BATCH = 1000
CLAIM_RETENTION = timedelta(days=7)


class Verdict(StrEnum):
    """Why :meth:`Engine.admit` did or did not produce a ``running`` row."""

    RUN = "run"
    """This replica runs the slot: the ``running`` row exists."""
    LOST = "lost"
    """Another caller already claimed the slot (a duplicate, or another replica won)."""
    SKIPPED = "skipped"
    """A run of the schedule was live; a ``skipped`` row was recorded."""
    UNAVAILABLE = "unavailable"
    """The store could not be written: nothing runs (fail closed)."""
    PAUSED = "paused"
    """An operator paused the schedule (:mod:`.pauses`): nothing runs, nothing is recorded."""


@dataclass(frozen=True, slots=True)
class Admission:
    verdict: Verdict
    run: RunRecord | None = None
    """The ``running`` row (``RUN``) or the ``skipped`` row (``SKIPPED``)."""


@dataclass(slots=True)
class _Armed:
    schedule: Schedule
    last_planned: datetime
    due_at: datetime


@dataclass(slots=True)
class _InFlight:
    """This process's live runs, per schedule: the in-process half of the overlap rule."""

    runs: dict[str, dict[str, RunRecord]] = field(default_factory=lambda: defaultdict(dict))
    locks: dict[str, anyio.Lock] = field(default_factory=dict)
    count: int = 0
    idle: anyio.Event = field(default_factory=anyio.Event)

    def add(self, run: RunRecord) -> None:
        self.runs[run.name][run.id] = run
        self.count += 1

    def remove(self, run: RunRecord) -> None:
        if self.runs[run.name].pop(run.id, None) is not None:
            self.count -= 1
            if self.count == 0:
                self.idle.set()
                self.idle = anyio.Event()

    def lock(self, name: str) -> anyio.Lock:
        return self.locks.setdefault(name, anyio.Lock())


class Engine:
    """Arms ``self`` schedules and carries out firings. Owned by :class:`Scheduling`."""

    def __init__(
        self,
        *,
        schedules: Sequence[Schedule],
        store: Store,
        clock: Clock,
        runner: Runner,
        coordination: Coordination,
        replica_id: str,
        heartbeat_ms: int,
        shutdown_grace_ms: int,
        run_retention_ms: int | None,
        watched_names: Sequence[str] = (),
        pauses: PauseView = NO_PAUSES,
    ) -> None:
        self.schedules = list(schedules)
        self.watched_names = list(watched_names) or [s.name for s in self.schedules]
        """Every schedule of the app (external ones too): whose corpses :meth:`reap` marks."""
        self.store = store
        self.pauses = pauses
        self.clock = clock
        self.runner = runner
        self.coordination = coordination
        self.replica_id = replica_id
        self.heartbeat_ms = heartbeat_ms
        self.shutdown_grace = shutdown_grace_ms / 1000
        self.run_retention = (
            None if run_retention_ms is None else timedelta(milliseconds=run_retention_ms)
        )
        # The timer: a heap of distinct instants, each with the schedules due then. A herd of
        # 10,000 schedules on one cron is one heap entry and a list, not 10,000 heap pushes.
        self._instants: list[datetime] = []
        self._due: dict[datetime, list[_Armed]] = {}
        self._armed: dict[str, _Armed] = {}
        self._in_flight = _InFlight()
        self._finishing: set[str] = set()
        self._runs: TaskGroup | None = None
        self._timer_scope: anyio.CancelScope | None = None
        self._stopped = anyio.Event()

    # -- lifecycle ------------------------------------------------------------------------

    async def supervise(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Catch up on slots missed while down, arm every schedule, keep firing until
        :meth:`stop`."""
        try:
            async with anyio.create_task_group() as runs:
                self._runs = runs
                with anyio.CancelScope() as timer_scope:
                    self._timer_scope = timer_scope
                    await self.reap()
                    now = self.clock.now()
                    start_from = await self._boot_backfill(now)
                    for schedule in self.schedules:
                        self.arm(schedule, start_from.get(schedule.name, now))
                    runs.start_soon(self._retention_loop)
                    runs.start_soon(self._reaper_loop)
                    task_status.started()
                    await self._timer_loop()
                await self._drain()
                runs.cancel_scope.cancel()
        finally:
            self._runs = None
            self._stopped.set()

    async def _boot_backfill(self, now: datetime) -> dict[str, datetime]:
        """Plan and start the catch-up of every schedule from its last run row, before the
        live timer is armed; returns where each schedule's live timer continues.

        The ``missed`` rows are written and the first catch-up firing admitted before this
        returns, so a caught-up firing never races the first live one. The rest of an
        ``all`` catch-up runs in order in the background.
        """
        if not self.schedules:
            return {}
        last_runs = await self.store.last_runs([s.name for s in self.schedules])
        start_from: dict[str, datetime] = {}
        plans: list[tuple[Schedule, CatchUpPlan]] = []
        for schedule in self.schedules:
            last = last_runs.get(schedule.name)
            if last is None:
                continue  # never ran: nothing to catch up on
            since = self.pauses.catch_up_from(schedule.name, last.scheduled_at)
            if since is None:
                continue  # paused: the live timer drops its slots until resumed
            # Slots of the last moments are not downtime: a replica booting just after an
            # instant leaves it to the live timer (which claims it like its peers do) instead of
            # recording it missed under another replica's feet.
            horizon = now - BOOT_GRACE
            slots, capped = passed_slots(schedule.spec, since, horizon)
            plan = plan_boot_backfill(slots, schedule.backfill, capped)
            # A last slot ahead of now (the clock stepped back across a restart) must not run
            # again: the live timer continues after whichever is newer.
            start_from[schedule.name] = max(horizon, plan.last_planned or since)
            if plan.fire or plan.missed:
                plans.append((schedule, plan))
                logger.info(
                    "schedule: backfill  name=%s policy=%s passed=%d fire=%d missed=%d%s",
                    schedule.name,
                    schedule.backfill.value,
                    len(slots),
                    len(plan.fire),
                    len(plan.missed),
                    " (capped at the newest 1000 slots)" if capped else "",
                )
        async with anyio.create_task_group() as prefix:
            for schedule, plan in plans:
                prefix.start_soon(self._catch_up, schedule, plan)
        return start_from

    async def _catch_up(self, schedule: Schedule, plan: CatchUpPlan) -> None:
        if plan.missed:
            await self.record_missed(schedule, plan.missed, Trigger.SELF)
        if plan.fire:
            first = await self.admit(schedule, plan.fire[0], Trigger.SELF)
            self._start(self._catch_up_rest, schedule, first, plan.fire[1:])

    async def _catch_up_rest(
        self, schedule: Schedule, first: Admission, rest: list[datetime]
    ) -> None:
        if first.verdict is Verdict.RUN and first.run is not None:
            await self._execute(schedule, first.run)
        for slot in rest:
            await self.fire(schedule, slot, Trigger.SELF)

    async def stop(self) -> None:
        """Stop arming, give in-flight runs the grace period, cancel the rest (recorded
        ``failed``/``shutdown``)."""
        if self._timer_scope is not None:
            self._timer_scope.cancel()
        await self._stopped.wait()

    async def _drain(self) -> None:
        if self._in_flight.count == 0:
            return
        logger.info(
            "scheduler: stopping  inFlight=%d graceMs=%d",
            self._in_flight.count,
            int(self.shutdown_grace * 1000),
        )
        with anyio.move_on_after(self.shutdown_grace):
            while self._in_flight.count:
                await self._in_flight.idle.wait()

    # -- the timer ------------------------------------------------------------------------

    def arm(
        self, schedule: Schedule, last_planned: datetime, due_at: datetime | None = None
    ) -> None:
        if due_at is None:
            due_at = schedule.next_occurrence(last_planned)
        armed = self._armed[schedule.name] = _Armed(schedule, last_planned, due_at)
        self._enqueue(armed)

    def _enqueue(self, armed: _Armed) -> None:
        bucket = self._due.get(armed.due_at)
        if bucket is None:
            bucket = self._due[armed.due_at] = []
            heapq.heappush(self._instants, armed.due_at)
        bucket.append(armed)

    def next_firing(self, name: str) -> datetime | None:
        armed = self._armed.get(name)
        return None if armed is None else armed.due_at

    async def _timer_loop(self) -> None:
        while True:
            now = self.clock.now()
            self._dispatch_due(now)
            wait = MAX_SLEEP_SECONDS
            if self._instants:
                wait = min(wait, (self._instants[0] - now).total_seconds())
            await self.clock.sleep(max(wait, 0.0))

    def _dispatch_due(self, now: datetime) -> None:
        # Schedules sharing (cron, zone, last_planned) share one walk: the herd at :00 costs
        # one cron computation per distinct expression, not one per schedule.
        walks: dict[tuple[int, datetime], tuple[list[datetime], bool]] = {}
        nexts: dict[tuple[int, datetime], datetime] = {}
        herd: list[tuple[Schedule, datetime]] = []
        stepped_back: list[_Armed] = []
        while self._instants and self._instants[0] <= now:
            for armed in self._due.pop(heapq.heappop(self._instants)):
                schedule = armed.schedule
                if self._armed.get(schedule.name) is not armed:
                    continue  # re-armed since: that entry is the live one
                walk_key = (id(schedule.spec), armed.last_planned)
                if walk_key not in walks:
                    walks[walk_key] = passed_slots(schedule.spec, armed.last_planned, now)
                slots, capped = walks[walk_key]
                if capped:
                    logger.warning(
                        "schedule: catch-up capped  name=%s slots=%d (older slots not enumerated)",
                        schedule.name,
                        len(slots),
                    )
                if not slots:
                    # The clock stepped back while we slept: re-arm, fire nothing twice.
                    stepped_back.append(armed)
                    continue
                next_key = (id(schedule.spec), slots[-1])
                if next_key not in nexts:
                    nexts[next_key] = schedule.next_occurrence(slots[-1])
                self.arm(schedule, slots[-1], nexts[next_key])
                if self.pauses.is_paused(schedule.name):
                    continue  # paused: the slots pass unfired and unrecorded (see pauses.py)
                if len(slots) == 1 and schedule.on_overlap is not OverlapPolicy.QUEUE:
                    herd.append((schedule, slots[0]))
                else:
                    self._start(self._fire_slots, schedule, slots)
        for armed in stepped_back:
            self._enqueue(armed)
        if herd:
            self._start(self._fire_batch, herd)

    def _start(self, fn, *args) -> None:  # type: ignore[no-untyped-def]
        if self._runs is not None:
            self._runs.start_soon(fn, *args)

    async def _fire_slots(self, schedule: Schedule, slots: list[datetime]) -> None:
        plan = plan_fall_behind(slots, schedule.backfill)
        if plan.missed:
            await self.record_missed(schedule, plan.missed, Trigger.SELF)
        for slot in plan.fire:
            await self.fire(schedule, slot, Trigger.SELF)

    # -- one firing -----------------------------------------------------------------------

    async def fire(self, schedule: Schedule, scheduled_at: datetime, trigger: Trigger) -> None:
        """Gate, overlap, record and run one slot (waits for the run to finish)."""
        admission = await self.admit(schedule, scheduled_at, trigger)
        if admission.verdict is Verdict.RUN and admission.run is not None:
            await self._execute(schedule, admission.run)

    async def fire_now(self, schedule: Schedule) -> RunRecord:
        """Run now: always runs, ``trigger="manual"``, no coordination, no overlap rule.
        Returns once the run row exists; the handler runs in the background."""
        admission = await self.admit(schedule, self.clock.now(), Trigger.MANUAL)
        if admission.run is None:
            raise StoreUnavailableError(
                f'could not record a Run now of "{schedule.name}" — the ledger is unreachable'
            )
        self.start(schedule, admission.run)
        return admission.run

    def start(self, schedule: Schedule, run: RunRecord) -> None:
        """Execute an admitted run in the background (its row is already ``running``)."""
        self._start(self._execute, schedule, run)

    async def admit(
        self, schedule: Schedule, scheduled_at: datetime, trigger: Trigger
    ) -> Admission:
        """Decide whether this replica runs the slot; if so write its ``running`` row (the
        caller then runs it: :meth:`start` in the background, or awaits :meth:`fire`)."""
        outcome = CoordinationOutcome.NONE
        if trigger is not Trigger.MANUAL:
            if self.pauses.holds(schedule.name, scheduled_at):
                return Admission(Verdict.PAUSED)
            gate = await self._gate(schedule, scheduled_at, trigger)
            if isinstance(gate, Verdict):
                return Admission(gate)
            outcome = gate
            if schedule.on_overlap is OverlapPolicy.SKIP:
                skipped = await self._skip(schedule, scheduled_at, trigger, outcome)
                if skipped is not None:
                    return Admission(Verdict.SKIPPED, skipped)
            if schedule.on_overlap is OverlapPolicy.QUEUE:
                # In-process chain: serialise behind this process's run of the schedule.
                await self._in_flight.lock(schedule.name).acquire()
        now = self.clock.now()
        run = self.new_row(schedule, scheduled_at, RunStatus.RUNNING, trigger, outcome, now)
        try:
            await self.runner.ledger.insert(run)
        except StoreUnavailableError as exc:
            self._release_queue(schedule, trigger)
            logger.warning(
                "schedule: could not record the firing — not running it  name=%s slot=%s: %s",
                schedule.name,
                iso_z(scheduled_at),
                exc,
            )
            return Admission(Verdict.UNAVAILABLE)
        self._in_flight.add(run)
        return Admission(Verdict.RUN, run)

    async def run_manual(self, schedule: Schedule, scheduled_at: datetime) -> RunStatus:
        """Run one slot as an operator instruction (``trigger="manual"``, no coordination, no
        overlap rule) and wait for it; the range backfill's step."""
        admission = await self.admit(schedule, scheduled_at, Trigger.MANUAL)
        if admission.run is None:
            raise StoreUnavailableError(
                f'could not record the manual run of "{schedule.name}" at {iso_z(scheduled_at)}'
                " — the ledger is unreachable"
            )
        return await self._execute(schedule, admission.run)

    async def _execute(self, schedule: Schedule, run: RunRecord) -> RunStatus:
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self._handler_done(schedule, run)

        try:
            return await self.runner.execute(schedule, run, release)
        finally:
            release()
            self._finishing.discard(run.id)

    def _release_queue(self, schedule: Schedule, trigger: Trigger) -> None:
        if trigger is not Trigger.MANUAL and schedule.on_overlap is OverlapPolicy.QUEUE:
            self._in_flight.lock(schedule.name).release()

    async def _gate(
        self, schedule: Schedule, scheduled_at: datetime, trigger: Trigger
    ) -> CoordinationOutcome | Verdict:
        # An external arrival is claimed whatever the coordination: delivery is at-least-once,
        # so the claim is what dedupes it, on SQLite too.
        external = trigger is Trigger.EXTERNAL
        if self.coordination is Coordination.SINGLE and not external:
            return CoordinationOutcome.SINGLE
        key = claim_key(schedule.name, scheduled_at)
        try:
            won = await self.runner.ledger.claim(key)
        except StoreUnavailableError as exc:
            # Fail closed: a missing run is recoverable by backfill, a double-fire often isn't.
            logger.warning(
                "schedule: claim failed — not firing (fail-closed)  name=%s slot=%s: %s",
                schedule.name,
                iso_z(scheduled_at),
                exc,
            )
            return Verdict.UNAVAILABLE
        if not won:
            return Verdict.LOST
        return CoordinationOutcome.EXTERNAL if external else CoordinationOutcome.WON_LOCK

    async def _skip(
        self,
        schedule: Schedule,
        scheduled_at: datetime,
        trigger: Trigger,
        outcome: CoordinationOutcome,
    ) -> RunRecord | None:
        """The overlap rule for one firing: the ``skipped`` row when a run is live."""
        now = self.clock.now()
        holder = self._held_here(schedule)
        if holder is None and self.coordination is not Coordination.SINGLE:
            try:
                rows = await self.store.live_runs(schedule.name)
            except StoreUnavailableError as exc:
                logger.warning("schedule: overlap check failed  name=%s: %s", schedule.name, exc)
                rows = []
            holder = await self._live_among(schedule, rows, now)
        if holder is None:
            return None
        skipped = self._skipped_row(schedule, scheduled_at, trigger, outcome, holder, now)
        try:
            await self.runner.ledger.insert(skipped)
        except StoreUnavailableError as exc:
            logger.warning("schedule: could not record skipped  name=%s: %s", schedule.name, exc)
        return skipped

    def new_row(
        self,
        schedule: Schedule,
        scheduled_at: datetime,
        status: RunStatus,
        trigger: Trigger,
        outcome: CoordinationOutcome,
        now: datetime,
        run_id: str | None = None,
    ) -> RunRecord:
        """A new ledger row written by this replica (see :func:`ledger.new_row`)."""
        return new_row(
            schedule.name, scheduled_at, status, trigger, outcome, now, self.replica_id, run_id
        )

    def _held_here(self, schedule: Schedule) -> RunRecord | None:
        return next(iter(self._in_flight.runs[schedule.name].values()), None)

    def _skipped_row(
        self,
        schedule: Schedule,
        scheduled_at: datetime,
        trigger: Trigger,
        outcome: CoordinationOutcome,
        holder: RunRecord,
        now: datetime,
        run_id: str | None = None,
    ) -> RunRecord:
        seen = last_seen(holder.fired_at, holder.heartbeat_at) or now
        logger.info(
            "schedule: overlap skip  name=%s scope=%s heldBy=%s lastSeenMs=%d",
            schedule.name,
            "process" if holder.replica_id == self.replica_id else "cluster",
            holder.replica_id,
            int((now - seen).total_seconds() * 1000),
        )
        skipped = RunStatus.SKIPPED
        return self.new_row(schedule, scheduled_at, skipped, trigger, outcome, now, run_id)

    async def _live_among(
        self, schedule: Schedule, rows: Sequence[RunRecord], now: datetime
    ) -> RunRecord | None:
        """The live run among ``schedule``'s ``running`` rows on other replicas, if any;
        corpses found on the way are marked ``failed/abandoned``."""
        rows = [row for row in rows if row.id not in self._finishing]
        live = [r for r in rows if self._alive(r, now)]
        await self._mark_dead(schedule.name, rows, now)
        return live[0] if live else None

    def _alive(self, row: RunRecord, now: datetime) -> bool:
        return is_live(row.status, row.fired_at, row.heartbeat_at, now, self.heartbeat_ms)

    async def _mark_dead(self, name: str, rows: Sequence[RunRecord], now: datetime) -> int:
        """One conditional write per dead row, so each corpse is marked exactly once across
        every replica that reads it dead. A stale beat hands ownership to nobody."""
        marked = 0
        for row in rows:
            if row.id in self._finishing or self._alive(row, now):
                continue
            try:
                done = await self.store.update_run(
                    row.id,
                    expect_status=RunStatus.RUNNING,
                    status=RunStatus.FAILED,
                    finished_at=now,
                    error_tag="abandoned",
                    error_message=f"replica {row.replica_id} stopped reporting (no heartbeat "
                    f"for {self.heartbeat_ms * 3} ms)",
                )
            except StoreUnavailableError:
                done = False
            if done:
                marked += 1
                logger.warning(
                    "schedule: marked a silent run abandoned  name=%s runId=%s heldBy=%s",
                    name,
                    row.id,
                    row.replica_id,
                )
        return marked

    async def _fire_batch(self, items: list[tuple[Schedule, datetime]]) -> None:
        """The herd: many schedules due at one instant, admitted together — one claim
        statement per 1,000 keys, one overlap read, one insert — then started in one pass.

        Admitting in chunks (starting the first handlers while later rows are written) was
        measured and lost: on SQLite the driver thread's per-row GIL handoffs stall while the
        loop starts tasks, and on Postgres the extra round trips cost more than they overlap.
        """
        starts = await self._admit_batch(items)
        await self.runner.execute_many(starts, self._handler_done, self._recorded)

    async def _admit_batch(
        self, items: list[tuple[Schedule, datetime]]
    ) -> list[tuple[Schedule, RunRecord]]:
        """Claim, apply the overlap rule to and record the herd; returns the runs to start
        (their ``running`` rows are written and they count as in flight)."""
        now = self.clock.now()
        outcome = CoordinationOutcome.SINGLE
        if self.coordination is not Coordination.SINGLE:
            outcome = CoordinationOutcome.WON_LOCK
            keys = [claim_key(schedule.name, slot) for schedule, slot in items]
            try:
                won = await self.store.claim_many(keys, self.replica_id, now)
            except StoreUnavailableError as exc:
                logger.warning(
                    "schedule: claim failed — not firing (fail-closed)  slots=%d first=%s@%s: %s",
                    len(items),
                    items[0][0].name,
                    iso_z(items[0][1]),
                    exc,
                )
                return []
            items = [item for item, key in zip(items, keys, strict=True) if key in won]
        elsewhere: dict[str, list[RunRecord]] = defaultdict(list)
        ask = [
            s.name
            for s, _ in items
            if s.on_overlap is OverlapPolicy.SKIP and self._held_here(s) is None
        ]
        if ask and self.coordination is not Coordination.SINGLE:
            try:
                for row in await self.store.live_runs(ask):
                    elsewhere[row.name].append(row)
            except StoreUnavailableError as exc:
                logger.warning("schedule: overlap check failed  schedules=%d: %s", len(ask), exc)
        rows: list[RunRecord] = []
        starts: list[tuple[Schedule, RunRecord]] = []
        for (schedule, slot), run_id in zip(items, new_run_ids(len(items)), strict=True):
            if schedule.on_overlap is OverlapPolicy.SKIP:
                holder = self._held_here(schedule)
                if holder is None and elsewhere.get(schedule.name):
                    holder = await self._live_among(schedule, elsewhere[schedule.name], now)
                if holder is not None:
                    rows.append(
                        self._skipped_row(
                            schedule, slot, Trigger.SELF, outcome, holder, now, run_id
                        )
                    )
                    continue
            running = RunStatus.RUNNING
            run = self.new_row(schedule, slot, running, Trigger.SELF, outcome, now, run_id)
            rows.append(run)
            starts.append((schedule, run))
        try:
            await self.store.insert_runs(rows)
        except StoreUnavailableError as exc:
            logger.warning(
                "schedule: could not record %d firings — not running them: %s", len(rows), exc
            )
            return []
        for _, run in starts:
            self._in_flight.add(run)
        return starts

    def _handler_done(self, schedule: Schedule, run: RunRecord) -> None:
        # The overlap rule looks at handlers, not at pending writes: from here the run no
        # longer holds its schedule, and a row read `running` meanwhile is not a live run.
        self._finishing.add(run.id)
        self._in_flight.remove(run)
        self._release_queue(schedule, run.trigger)

    def _recorded(self, outcomes: Sequence[RunOutcome]) -> None:
        for outcome in outcomes:
            self._finishing.discard(outcome.run_id)

    async def record_missed(
        self, schedule: Schedule, slots: list[datetime], trigger: Trigger
    ) -> None:
        """Record slots nobody ran as ``missed`` (once across replicas under advisoryLock)."""
        single = self.coordination is Coordination.SINGLE
        outcome = CoordinationOutcome.SINGLE if single else CoordinationOutcome.WON_LOCK
        try:
            slots = await record_missed_slots(
                self.store,
                schedule,
                slots,
                trigger,
                outcome,
                replica_id=self.replica_id,
                now=self.clock.now(),
                claim=not single,
            )
        except StoreUnavailableError as exc:
            logger.warning(
                "schedule: could not record %d missed slots  name=%s: %s",
                len(slots),
                schedule.name,
                exc,
            )
            return
        if slots:
            logger.info(
                "schedule: missed  name=%s slots=%d first=%s last=%s",
                schedule.name,
                len(slots),
                iso_z(slots[0]),
                iso_z(slots[-1]),
            )

    # -- housekeeping ---------------------------------------------------------------------

    async def _reaper_loop(self) -> None:
        interval = 3 * self.heartbeat_ms / 1000
        while True:
            await self.clock.sleep(interval)
            await self.reap()

    async def reap(self) -> int:
        """Mark every dead ``running`` row of this app's schedules ``failed/abandoned`` (any
        overlap policy, any coordination), so the ledger never shows a corpse as running.
        Runs at boot and every three heartbeats; returns how many rows this call marked."""
        if not self.watched_names:
            return 0
        try:
            rows = await self.store.live_runs(self.watched_names)
        except StoreUnavailableError as exc:
            logger.warning("scheduler: corpse check failed: %s", exc)
            return 0
        mine = {run_id for runs in self._in_flight.runs.values() for run_id in runs}
        by_name: dict[str, list[RunRecord]] = defaultdict(list)
        for row in rows:
            if row.id not in mine:
                by_name[row.name].append(row)
        now = self.clock.now()
        marked = 0
        for name, candidates in by_name.items():
            marked += await self._mark_dead(name, candidates, now)
        return marked

    async def _retention_loop(self) -> None:
        while True:
            await self.sweep()
            await self.clock.sleep(RETENTION_INTERVAL_SECONDS)

    async def sweep(self) -> int:
        """Delete finished runs past retention and old claims, in batches. Queued rows stay."""
        now = self.clock.now()
        removed = 0
        try:
            if self.run_retention is not None:
                while True:
                    n = await self.store.sweep_runs(now - self.run_retention, RETENTION_BATCH)
                    removed += n
                    if n < RETENTION_BATCH:
                        break
            await self.store.prune_claims(now - CLAIM_RETENTION, RETENTION_BATCH)
        except StoreUnavailableError as exc:
            logger.warning("scheduler: retention sweep failed: %s", exc)
        return removed
