"""When nobody fires: the external missed policy (``external_missed_policy``).

An external schedule arms no timer, so a platform scheduler that stops firing produces silence
— which on a dashboard looks like a schedule with nothing to do. This watcher reconciles the
difference: an occurrence whose trigger window closed without an arrival is written to the
ledger ``missed`` and counted in ``voltro_schedule_external_missed_total{name}``.

* ``record`` (default): record and count; do not run.
* ``record-and-run``: record and count, and also run it (a ``running`` row through the
  engine's admission — overlap rules apply — then the handler in the background). The ledger
  then shows the slot twice: the ``missed`` row (the platform never fired) and the run (the app
  fired it itself).
* ``off``: the watcher does not start.

**When an occurrence counts as never triggered.** An arrival stating no time can reach an
occurrence until :func:`~fastapi_voltro_schedules.external.closes_at` — ``min(occurrence +
external_trigger_skew_ms, next occurrence)``. The watcher looks at an occurrence
:data:`MISSED_GRACE` (2 s) after that: the grace lets an arrival accepted at the very edge of
the window commit its claim first. It wakes at the earliest such instant over all external
schedules, and at least every 30 s (re-checked against the clock, so a clock step is caught);
the first check runs at boot.

**Where it starts.** At the newest clock-driven row of the schedule (``store.last_run``), or at
this process's boot when the schedule has none; from there every closed occurrence is checked
once per process, the walk capped at the newest 1000 like a backfill.

**The in-app fallback** (``define_schedule(..., trigger="external", fallback="self")``). For
such a schedule the watcher is its timer: where it would record an occurrence ``missed``, it
fires it instead, ``trigger="self"``, through the dispatcher (overlap rules apply), claimed as an
arrival is — so the row says ``coordination_outcome="external"`` (the arrival's claim elected
it) — and logs a WARNING saying the platform was late, counted in
``voltro_schedule_external_fallback_total{name}``. Slots found closed at once follow the
schedule's ``backfill`` policy as the timer's would (downtime before this process's boot: boot
catch-up; after it: falling behind); those not run are recorded ``missed``. The missed policy
does not apply to these schedules (``off`` does not stop the fallback either).

**Once across replicas.** Each occurrence is *claimed* (``<name>@<second>`` in
``_voltro_schedule_claims``) before it is recorded, whatever the coordination: an occurrence
that any arrival already claimed is not missed, and of several replicas' watchers exactly one
records it. The claim also means that a late arrival *stating* that occurrence's time — a Cloud
Scheduler retry, say — is answered ``200 duplicate`` with the ``missed`` row's id (or the run's,
under ``record-and-run``): the slot was accounted for, and it is not fired again.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol

import anyio.lowlevel

from .clock import iso_z
from .coordination import Verdict
from .enums import CoordinationOutcome, ExternalMissedPolicy, RunStatus, Trigger, TriggerMode
from .errors import StoreUnavailableError
from .external import closes_at
from .fire_requests import FireRequest, Why
from .ledger import new_row, record_missed_slots
from .logs import logger
from .metrics import SchedulerMetrics, default_metrics
from .planning import passed_slots, plan_boot_backfill, plan_fall_behind

if TYPE_CHECKING:
    from .clock import Clock
    from .config import SchedulingConfig
    from .definition import Schedule
    from .definitions import Versions
    from .dispatcher import Firing
    from .pauses import PauseView
    from .store import Store


class _Door(Protocol):
    """The engine's one door (:meth:`..dispatcher.Dispatcher.fire`)."""

    async def fire(self, request: FireRequest) -> Firing: ...


class Scheduling(Protocol):
    """What the watcher needs of the scheduler (:class:`~fastapi_voltro_schedules.Scheduling`
    is one) — a protocol, so this module never imports the one that starts it."""

    @property
    def schedules(self) -> Sequence[Schedule]: ...
    @property
    def config(self) -> SchedulingConfig: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def store(self) -> Store | None: ...
    @property
    def engine(self) -> _Door | None: ...
    @property
    def pauses(self) -> PauseView | None: ...
    @property
    def versions(self) -> Versions: ...

    def trigger_of(self, schedule: Schedule) -> TriggerMode: ...


__all__ = ["MISSED_GRACE", "ExternalMissedWatcher", "watch_external_missed"]

MISSED_GRACE = timedelta(seconds=2)
"""How long after an occurrence's trigger window closes the watcher looks at it."""
MAX_WAIT_SECONDS = 30.0
RETRY_SECONDS = 5.0
"""After a store failure: look again this soon (the cursor did not move)."""


async def watch_external_missed(
    scheduling: Scheduling, *, metrics: SchedulerMetrics | None = None
) -> None:
    """Run the external missed policy of ``scheduling`` until cancelled.

    Returns at once when no schedule is external, or the policy is ``off`` and none has a
    fallback. Started by :meth:`Scheduling.run` next to the engine; the engine must be built
    first.
    """
    schedules = [
        s for s in scheduling.schedules if scheduling.trigger_of(s) is TriggerMode.EXTERNAL
    ]
    if scheduling.config.external_missed_policy is ExternalMissedPolicy.OFF:
        schedules = [s for s in schedules if s.fallback is not None]
    if not schedules:
        return
    watcher = ExternalMissedWatcher(scheduling, schedules, metrics or default_metrics())
    await watcher.run()


class ExternalMissedWatcher:
    """The loop behind :func:`watch_external_missed` (one per process)."""

    def __init__(
        self,
        scheduling: Scheduling,
        schedules: Sequence[Schedule],
        metrics: SchedulerMetrics,
    ) -> None:
        self.scheduling = scheduling
        self.schedules = list(schedules)
        self.metrics = metrics
        self.policy = scheduling.config.external_missed_policy
        self.skew_ms = scheduling.config.external_trigger_skew_ms
        self.replica_id = scheduling.config.replica_id
        self.clock = scheduling.clock
        self.boot = self.clock.now()
        self.cursors: dict[str, datetime] = {}
        """Per schedule: the newest occurrence already accounted for."""

    async def run(self) -> None:
        while True:
            try:
                healthy = await self.check()
            except Exception:
                # Supervised: a bug here must not take the app's task group (and the app) down.
                logger.exception("schedule: external missed check crashed — retrying")
                healthy = False
            now = self.clock.now()
            wait = RETRY_SECONDS if not healthy else self._seconds_to_next_check(now)
            if wait <= 0:
                # The clock moved on during the pass (a long record-and-run, a clock step):
                # another occurrence already closed. A healthy pass always advances the
                # cursors, so this cannot spin.
                await anyio.lowlevel.checkpoint()
                continue
            await self.clock.sleep(min(wait, MAX_WAIT_SECONDS))

    def _seconds_to_next_check(self, now: datetime) -> float:
        wake: datetime | None = None
        for schedule in self.schedules:
            cursor = self.cursors.get(schedule.name)
            if cursor is None:
                return RETRY_SECONDS
            upcoming = schedule.next_occurrence(cursor)
            at = closes_at(schedule.spec, upcoming, self.skew_ms) + MISSED_GRACE
            wake = at if wake is None else min(wake, at)
        return MAX_WAIT_SECONDS if wake is None else (wake - now).total_seconds()

    async def check(self) -> bool:
        """One pass over every external schedule; ``False`` if the store failed somewhere."""
        store = self.scheduling.store
        if store is None:
            return False
        healthy = True
        missing = [s.name for s in self.schedules if s.name not in self.cursors]
        if missing:
            try:
                last = await store.last_runs(missing)
            except StoreUnavailableError as exc:
                logger.warning("schedule: external missed check could not read the ledger: %s", exc)
                return False
            for name in missing:
                row = last.get(name)
                cursor = row.scheduled_at if row is not None else self.boot
                # A cron changed since the last row owes no slot of its new cadence from
                # before the change took effect (definitions.py): none is recorded missed.
                since = self.scheduling.versions.cadence_from(name)
                self.cursors[name] = cursor if since is None else max(cursor, since)
        if self.scheduling.pauses is not None:
            await self.scheduling.pauses.current()
        horizon = self.clock.now() - MISSED_GRACE
        for schedule in self.schedules:
            cursor = self.cursors[schedule.name]
            newest = self._newest_closed(schedule, horizon)
            if newest is None or newest <= cursor:
                continue
            closed, capped = passed_slots(schedule.spec, cursor, newest)
            if not closed:
                continue
            kept = self._unpaused(schedule, closed)
            if capped:
                logger.warning(
                    "schedule: external missed walk capped  name=%s slots=%d (older occurrences "
                    "not enumerated)",
                    schedule.name,
                    len(closed),
                )
            try:
                if kept:
                    await self.reconcile(schedule, kept)
            except StoreUnavailableError as exc:
                healthy = False
                logger.warning(
                    "schedule: could not record missed external occurrences  name=%s: %s",
                    schedule.name,
                    exc,
                )
                continue
            self.cursors[schedule.name] = closed[-1]
        return healthy

    def _unpaused(self, schedule: Schedule, slots: list[datetime]) -> list[datetime]:
        # A paused span is not a platform failure: nothing to record (see pauses.py).
        pauses = self.scheduling.pauses
        return slots if pauses is None else pauses.unpaused(schedule.name, slots)

    def _newest_closed(self, schedule: Schedule, horizon: datetime) -> datetime | None:
        """The newest occurrence whose trigger window closed at or before ``horizon``."""
        newest = schedule.previous_occurrence(horizon)
        if newest is not None and closes_at(schedule.spec, newest, self.skew_ms) > horizon:
            # still open; the one before it closed when this one began
            newest = schedule.previous_occurrence(newest - timedelta(microseconds=1))
        return newest

    async def reconcile(self, schedule: Schedule, slots: list[datetime]) -> None:
        """Record (and under ``record-and-run`` run) the occurrences of ``slots`` nobody
        claimed. Raises ``StoreUnavailableError``; claims already won stay won.

        A slot on one of the schedule's excluded days was not the platform's to trigger: it
        is recorded ``skipped`` with its reason (claimed, as an arrival would have been), and
        neither run nor counted missed."""
        if schedule.exclude is not None:
            off = [slot for slot in slots if schedule.excluded(slot) is not None]
            if off:
                await self._record(schedule, off)  # record_missed_slots writes them skipped
                off_days = set(off)
                slots = [slot for slot in slots if slot not in off_days]
                if not slots:
                    return
        if schedule.fallback is not None:
            await self._fall_back(schedule, slots)
            return
        if self.policy is ExternalMissedPolicy.RECORD_AND_RUN:
            recorded = await self._record_and_run(schedule, slots)
        else:
            recorded = await self._record(schedule, slots)
        if not recorded:
            return
        self.metrics.external_missed.labels(name=schedule.name).inc(len(recorded))
        logger.warning(
            "schedule: external trigger never arrived — recorded missed  name=%s slots=%d "
            "first=%s last=%s policy=%s",
            schedule.name,
            len(recorded),
            iso_z(recorded[0]),
            iso_z(recorded[-1]),
            self.policy.value,
        )

    async def _record(self, schedule: Schedule, slots: list[datetime]) -> list[datetime]:
        store = self.scheduling.store
        if store is None:
            raise StoreUnavailableError("the scheduler's store is closed")
        return await record_missed_slots(
            store,
            schedule,
            slots,
            Trigger.EXTERNAL,
            CoordinationOutcome.EXTERNAL,
            replica_id=self.replica_id,
            now=self.clock.now(),
            claim=True,
        )

    async def _record_and_run(self, schedule: Schedule, slots: list[datetime]) -> list[datetime]:
        engine, store = self.scheduling.engine, self.scheduling.store
        if engine is None or store is None:
            raise StoreUnavailableError("the scheduler is not running")
        recorded: list[datetime] = []
        for slot in slots:
            # The dispatcher's external admission claims the slot (whatever the coordination),
            # applies on_overlap and writes the running, skipped or queued row; the run (or
            # its wait in line) goes on in the background. Under on_overlap="queue" the line
            # orders the missed runs by scheduled_at.
            firing = await engine.fire(FireRequest(schedule, slot, Why.ARRIVAL))
            verdict = firing.admission.verdict
            if verdict is Verdict.LOST:
                continue  # an arrival or another replica has it
            if verdict is Verdict.UNAVAILABLE:
                raise StoreUnavailableError(f"could not admit {iso_z(slot)}")
            # The claim is ours. The missed row's id is minted after the run's, so a duplicate
            # arrival (which reports the oldest row of the slot) follows the run.
            await store.insert_run(
                new_row(
                    schedule.name,
                    slot,
                    RunStatus.MISSED,
                    Trigger.EXTERNAL,
                    CoordinationOutcome.EXTERNAL,
                    self.clock.now(),
                    self.replica_id,
                )
            )
            recorded.append(slot)
        return recorded

    async def _fall_back(self, schedule: Schedule, slots: list[datetime]) -> None:
        """Fire (as ``trigger="self"``) the occurrences of ``slots`` no arrival claimed, per
        the schedule's backfill policy; record the rest ``missed``."""
        engine, store = self.scheduling.engine, self.scheduling.store
        if engine is None or store is None:
            raise StoreUnavailableError("the scheduler is not running")
        down = [slot for slot in slots if slot <= self.boot]
        live = [slot for slot in slots if slot > self.boot]
        before, behind = (
            plan_boot_backfill(down, schedule.backfill),
            plan_fall_behind(live, schedule.backfill),
        )
        # one ordered pass: the older slots first, each after the ones before it
        plan = [(slot, False) for slot in before.missed] + [(slot, True) for slot in before.fire]
        plan += [(slot, False) for slot in behind.missed] + [(slot, True) for slot in behind.fire]
        missed: list[datetime] = []
        try:
            for slot, fire in sorted(plan):
                if fire:
                    await self._fire_fallback(engine, schedule, slot)
                else:
                    # claimed too: a slot an arrival already has is left alone
                    missed += await self._record(schedule, [slot])
        finally:
            if missed:
                self.metrics.external_missed.labels(name=schedule.name).inc(len(missed))
                logger.warning(
                    "schedule: external trigger never arrived — recorded missed  name=%s "
                    "slots=%d first=%s last=%s fallback=self backfill=%s",
                    schedule.name,
                    len(missed),
                    iso_z(missed[0]),
                    iso_z(missed[-1]),
                    schedule.backfill.value,
                )

    async def _fire_fallback(self, engine: _Door, schedule: Schedule, slot: datetime) -> None:
        # Claimed as an arrival is (whatever the coordination): a late arrival for this slot
        # is then answered duplicate, and of several replicas exactly one fires it.
        firing = await engine.fire(FireRequest(schedule, slot, Why.FALLBACK))
        verdict = firing.admission.verdict
        if verdict is Verdict.LOST or verdict is Verdict.PAUSED:
            return  # an arrival or another replica has it, or an operator paused it
        if verdict is Verdict.UNAVAILABLE:
            raise StoreUnavailableError(f"could not admit the fallback of {iso_z(slot)}")
        self.metrics.external_fallback.labels(name=schedule.name).inc()
        logger.warning(
            "schedule: platform trigger late — fired by the in-app fallback  name=%s slot=%s "
            "lateByMs=%d skewBudgetMs=%d verdict=%s",
            schedule.name,
            iso_z(slot),
            int((self.clock.now() - slot).total_seconds() * 1000),
            self.skew_ms,
            verdict.value,
        )
