"""External arrivals: what one delivery from a platform scheduler means, and what it gets back.

Delivery is at-least-once; the firing is not. Each arrival is snapped onto the schedule's
cadence (:func:`fastapi_voltro_schedules.external.snap`) and the occurrence is claimed in
``_voltro_schedule_claims`` whatever the coordination — on SQLite too — so every retry,
redelivery or twin CronJob of one firing, on any replica, resolves to one run. :func:`arrive`
answers an :class:`Arrival`:

* :attr:`ArrivalStatus.ACCEPTED` — this arrival started the run, as soon as its row exists (the
  handler, or its wait in line, continues in the background);
* :attr:`ArrivalStatus.DUPLICATE` — the occurrence was claimed before: the *first* run (also the
  ``missed`` row the missed policy recorded for it, or the in-app fallback's ``self`` run);
* :attr:`ArrivalStatus.SKIPPED` — a run of the schedule was still live under
  ``on_overlap="skip"``: the skipped row, terminal at once;
* :attr:`ArrivalStatus.PAUSED` — an operator paused the schedule (or, after the resume, the
  occurrence lies inside the paused span): nothing claimed, nothing recorded.

Refusals raise (nothing is claimed then): :class:`ScheduleNotFoundError`,
:class:`NotExternallyTriggeredError`, :class:`SchedulerNotRunningError` and the snap's
:class:`FutureArrivalError`, :class:`TooLateArrivalError`, :class:`OffCadenceError`. The trigger
route maps the answer and the refusals to HTTP; nothing here knows it is HTTP.

The room below the API: it needs of the scheduler only :class:`Scheduling` (a protocol, so this
module never imports the one that starts it), and of a running one its :class:`Arrivals` — the
engine that fires, the ledger that answers, and what this process remembers of the
occurrences it answered. That memory lives exactly as long as the run of the scheduler.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

import anyio

from .clock import iso_z
from .coordination import Verdict
from .enums import Trigger, TriggerMode
from .errors import (
    FutureArrivalError,
    NotExternallyTriggeredError,
    OffCadenceError,
    ScheduleNotFoundError,
    SchedulerNotRunningError,
    StoreUnavailableError,
    TooLateArrivalError,
    VoltroError,
)
from .external import FUTURE_TOLERANCE, SnapResult, SnapVerdict, snap
from .fire_requests import FireRequest, Why
from .logs import logger
from .models import claim_key
from .records import ROLLED_UP_HOLDER

if TYPE_CHECKING:
    from .clock import Clock
    from .config import SchedulingConfig
    from .coordination import Admission
    from .definition import Schedule
    from .dispatcher import Firing
    from .pauses import PauseView
    from .store import RunRecord

__all__ = [
    "ANSWERED_KEPT",
    "DUPLICATE_POLL_SECONDS",
    "DUPLICATE_WAIT_SECONDS",
    "Arrival",
    "ArrivalStatus",
    "Arrivals",
    "arrivals_of",
    "arrive",
]

DUPLICATE_WAIT_SECONDS = 5.0
"""How long a duplicate waits for the first arrival's run row. The winner inserts its row
right after its claim commits, so this only matters under a stalled database."""
DUPLICATE_POLL_SECONDS = 0.05
ANSWERED_KEPT = 512
"""Occurrences per running scheduler whose run this process remembers (the newest answered)."""


class ArrivalStatus(StrEnum):
    """What became of an arrival that was not refused."""

    ACCEPTED = "accepted"
    """This arrival started the run: its row exists, the handler runs in the background."""
    DUPLICATE = "duplicate"
    """The occurrence was claimed before: :attr:`Arrival.run` is the first run (``None`` when
    its claimant never recorded one)."""
    SKIPPED = "skipped"
    """A run of the schedule was still live (``on_overlap="skip"``): the skipped row."""
    PAUSED = "paused"
    """An operator paused the schedule: nothing was claimed or recorded."""


@dataclass(frozen=True, slots=True)
class Arrival:
    """What one arrival became."""

    status: ArrivalStatus
    scheduled_at: datetime | None
    """The occurrence it snapped to; ``None`` only for a paused schedule's arrival that matches
    no occurrence."""
    run: RunRecord | None


class _Engine(Protocol):
    """What an arrival needs of the engine: the door a firing goes through, and the line of
    firings waiting in this process."""

    async def fire(self, request: FireRequest) -> Firing: ...

    def waiting_here(self) -> list[RunRecord]: ...


class _Ledger(Protocol):
    """The ledger reads an arrival answers from (a :class:`~fastapi_voltro_schedules.store.Store`
    is one)."""

    async def run_for_slot(
        self, name: str, scheduled_at: datetime, trigger: Trigger
    ) -> RunRecord | None: ...

    async def claim_holder(self, key: str) -> tuple[str, datetime] | None: ...

    async def get_run(self, run_id: str) -> RunRecord | None: ...


class Scheduling(Protocol):
    """What an arrival needs of the scheduler (:class:`~fastapi_voltro_schedules.Scheduling`
    is one) — a protocol, so this module never imports the one that holds it."""

    @property
    def config(self) -> SchedulingConfig: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def arrivals(self) -> Arrivals | None: ...

    def get(self, name: str) -> Schedule | None: ...
    def trigger_of(self, schedule: Schedule) -> TriggerMode: ...
    async def current_pauses(self) -> PauseView: ...


def arrivals_of(scheduling: Scheduling) -> Arrivals:
    """The running scheduler's arrivals; :class:`SchedulerNotRunningError` before its boot and
    after its stop."""
    arrivals = scheduling.arrivals
    if arrivals is None:
        raise SchedulerNotRunningError()
    return arrivals


async def arrive(scheduling: Scheduling, name: str, stated: datetime | None = None) -> Arrival:
    """Snap, claim and (when first) start one external arrival for schedule ``name``, at the
    instant it ``stated`` (a header) or else now.

    Raises the refusals (see the module); nothing is claimed then.
    """
    schedule = scheduling.get(name)
    if schedule is None:
        raise ScheduleNotFoundError(name)
    if scheduling.trigger_of(schedule) is not TriggerMode.EXTERNAL:
        raise NotExternallyTriggeredError(
            f'schedule "{name}" is not externally triggered: its in-app timer keeps its time '
            f'(trigger="self") — nothing was fired. Set trigger="external" on the schedule '
            "(or VOLTRO_TRIGGER=external) to let a platform scheduler drive it",
            name=name,
            trigger=TriggerMode.SELF.value,
        )
    arrivals = arrivals_of(scheduling)
    now = scheduling.clock.now()
    skew_ms = scheduling.config.external_trigger_skew_ms
    plan = snap(schedule.spec, stated or now, now, skew_ms)
    # Before the refusals: a paused schedule's arrival is answered `paused`, whatever it states.
    if (await scheduling.current_pauses()).holds(name, plan.scheduled_at or plan.reference):
        return Arrival(ArrivalStatus.PAUSED, plan.scheduled_at, None)
    refusal = _refusal(schedule, plan, stated is not None, now, skew_ms)
    if refusal is not None:
        raise refusal
    assert plan.scheduled_at is not None  # an accepted snap names its occurrence
    return await arrivals.answer(schedule, plan.scheduled_at)


def _refusal(
    schedule: Schedule, plan: SnapResult, stated: bool, now: datetime, skew_ms: int
) -> VoltroError | None:
    """Why the snap refuses the arrival (it names the fix), or ``None`` when it does not."""
    name = schedule.name
    facts: dict[str, object] = {
        "name": name,
        "cron": schedule.cron,
        "timezone": schedule.timezone,
        "reference": iso_z(plan.reference),
        "stated": stated,
        "skewBudgetMs": int(plan.budget.total_seconds() * 1000),
    }
    if plan.verdict is SnapVerdict.FUTURE:
        return FutureArrivalError(
            f'schedule "{name}": the arrival states {iso_z(plan.reference)}, which is after '
            f"the app's clock ({iso_z(now)}) by more than "
            f"{int(FUTURE_TOLERANCE.total_seconds())} s — an occurrence is claimed only once "
            "it is due, or the real firing would be swallowed as a duplicate",
            now=iso_z(now),
            **facts,
        )
    if plan.verdict is SnapVerdict.TOO_LATE:
        late_ms = int((now - plan.reference).total_seconds() * 1000)
        return TooLateArrivalError(
            f'schedule "{name}": the arrival states {iso_z(plan.reference)}, {late_ms} ms '
            f"before the app's clock ({iso_z(now)}) — more than the skew budget of "
            f"{skew_ms} ms (VOLTRO_EXTERNAL_TRIGGER_SKEW_MS), so "
            "nothing was fired: a replay of an old firing never runs its slot (again). If "
            "deliveries really arrive this late, raise VOLTRO_EXTERNAL_TRIGGER_SKEW_MS; if "
            "the caller's clock is behind, fix its time sync",
            now=iso_z(now),
            lateByMs=late_ms,
            **{**facts, "skewBudgetMs": skew_ms},
        )
    if plan.verdict is SnapVerdict.OFF_CADENCE or plan.scheduled_at is None:
        newest = "none in the last 5 years" if plan.previous is None else iso_z(plan.previous)
        return OffCadenceError(
            f'schedule "{name}" holds cron "{schedule.cron}" (tz={schedule.timezone}); the '
            f"arrival at {iso_z(plan.reference)} is more than "
            f"{facts['skewBudgetMs']} ms after its newest occurrence ({newest}) — the "
            "caller's schedule does not match the app's: regenerate the manifest "
            "(voltro schedule-manifest --app MODULE:APP --provider PROVIDER --base-url URL) "
            "or find the drift (voltro schedule-manifest --app MODULE:APP --check PATH); to "
            "run the schedule now, off its cadence, use voltro schedule fire NAME",
            previousOccurrence=None if plan.previous is None else iso_z(plan.previous),
            **facts,
        )
    return None


class _Answering:
    """An occurrence whose arrival this process is answering right now."""

    __slots__ = ("answer", "done")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.answer: Arrival | None = None


class Arrivals:
    """One running scheduler's arrivals: the engine they fire through, the ledger that answers
    for an occurrence claimed before, and what this process remembers — the occurrences being
    answered now, and the run each recently answered occurrence resolved to.

    That run never changes (every later arrival of the occurrence is its ``duplicate``), so a
    retry storm's latecomers are answered from memory, without a read each (a storm's reads
    queued on the connection pool). Built when the scheduler boots and dropped when it stops:
    a restarted scheduler remembers nothing and asks the ledger.
    """

    def __init__(self, engine: _Engine, ledger: _Ledger) -> None:
        self.engine = engine
        self.ledger = ledger
        self._answering: dict[tuple[str, datetime], _Answering] = {}
        self._answered: OrderedDict[tuple[str, datetime], RunRecord] = OrderedDict()

    async def answer(self, schedule: Schedule, slot: datetime) -> Arrival:
        """The answer to an arrival for occurrence ``slot`` of ``schedule``, claiming it when
        no arrival did before.

        Arrivals of one occurrence at once in this process (a retry storm, twin CronJobs) are
        answered by the first of them: it claims, the rest wait for its answer and are its
        duplicates — one claim and one lookup per replica instead of one each — and so are the
        arrivals after it. When the first answered nothing with a run (paused, or it failed),
        each of the rest answers for itself."""
        key = (schedule.name, slot)
        known = self._answered.get(key)
        if known is not None:
            return Arrival(ArrivalStatus.DUPLICATE, slot, known)
        first = self._answering.get(key)
        if first is not None:
            await first.done.wait()
            if first.answer is not None and first.answer.run is not None:
                return Arrival(ArrivalStatus.DUPLICATE, slot, first.answer.run)
            return self._remember(key, await self._claim(schedule, slot))
        mine = self._answering[key] = _Answering()
        try:
            mine.answer = self._remember(key, await self._claim(schedule, slot))
            return mine.answer
        finally:
            del self._answering[key]
            mine.done.set()

    def _remember(self, key: tuple[str, datetime], answer: Arrival) -> Arrival:
        if answer.run is not None:  # paused, or nothing recorded: the next arrival asks again
            self._answered[key] = answer.run
            if len(self._answered) > ANSWERED_KEPT:
                self._answered.popitem(last=False)
        return answer

    async def _claim(self, schedule: Schedule, slot: datetime) -> Arrival:
        """Claim ``slot`` for ``schedule`` and start its run, or find the run that claimed it."""
        # A retry of an occurrence already recorded is answered from the ledger without a
        # write: its claim could only lose, and on SQLite that write queues behind every other
        # writer.
        recorded = await self._recorded_run(schedule, slot)
        if recorded is not None:
            return Arrival(ArrivalStatus.DUPLICATE, slot, recorded)
        # Answered as soon as the firing's row exists: a queued firing waits its turn in the
        # background, never in the request.
        for _ in range(2):
            admission = await self._fire(schedule, slot)
            if admission.verdict in (Verdict.RUN, Verdict.QUEUED) and admission.run is not None:
                return Arrival(ArrivalStatus.ACCEPTED, slot, admission.run)
            if admission.verdict is Verdict.SKIPPED:
                return Arrival(ArrivalStatus.SKIPPED, slot, admission.run)
            if admission.verdict is Verdict.PAUSED:  # paused between the check and the claim
                return Arrival(ArrivalStatus.PAUSED, slot, None)
            if admission.verdict is not Verdict.LOST:
                break
            run = await self.first_run(schedule, slot)
            if run is not None:
                return Arrival(ArrivalStatus.DUPLICATE, slot, run)
            # Claimed, no row, and the claim is gone now: its holder failed to record the
            # firing (the store blinked) and released it, so this arrival may run the slot.
            if not await self._claim_released(schedule.name, slot):
                return Arrival(ArrivalStatus.DUPLICATE, slot, None)
        raise StoreUnavailableError(
            f'schedule "{schedule.name}": the ledger could not be written — nothing was fired; '
            "retry"
        )

    async def _fire(self, schedule: Schedule, slot: datetime) -> Admission:
        """Hand the arrival's firing to the engine — the one place an arrival fires — and
        return as soon as its row exists (the claim decides whether it runs here)."""
        firing = await self.engine.fire(FireRequest(schedule, slot, Why.ARRIVAL))
        return firing.admission

    async def first_run(self, schedule: Schedule, slot: datetime) -> RunRecord | None:
        """The run the first arrival recorded for ``slot`` — polled briefly, because the
        winner (maybe on another replica) may not have inserted its row yet. Real time, not
        the scheduler's clock: this waits on another transaction, not on the schedule."""
        name = schedule.name
        polls = 0
        with anyio.move_on_after(DUPLICATE_WAIT_SECONDS):
            while True:
                run = await self._recorded_run(schedule, slot)
                if run is not None:
                    return run
                run = self.waiting_here(lambda r: r.name == name and r.scheduled_at == slot)
                if run is not None:
                    return run
                polls += 1
                if polls == 1 and await self._rolled_up(name, slot):
                    return None  # a success folded into its hour's count: no row to show
                if polls % 10 == 0 and await self._claim_released(name, slot):
                    return None  # released by a holder that could not record it: claim again
                await anyio.sleep(DUPLICATE_POLL_SECONDS)
        # Claimed but never recorded: the claimant died between its claim and its row (or the
        # slot was claimed by something that records no run). Nothing will run for it.
        logger.warning(
            "schedule: duplicate arrival for a slot nobody recorded  name=%s slot=%s",
            name,
            iso_z(slot),
        )
        return None

    async def _recorded_run(self, schedule: Schedule, slot: datetime) -> RunRecord | None:
        """The row an earlier arrival (or the missed policy, or the in-app fallback) recorded
        for ``slot``, if any."""
        # A slot the in-app fallback fired holds a trigger="self" row under the same claim.
        triggers: tuple[Trigger, ...] = (Trigger.EXTERNAL,)
        if schedule.fallback is not None:
            triggers = (Trigger.EXTERNAL, Trigger.SELF)
        for trigger in triggers:
            run = await self.ledger.run_for_slot(schedule.name, slot, trigger)
            if run is not None:
                return run
        return None

    async def _rolled_up(self, name: str, slot: datetime) -> bool:
        """Whether the slot's run succeeded and was folded into a rollup (``record=
        "failures"``): its claim says so, and no row will ever come."""
        holder = await self.ledger.claim_holder(claim_key(name, slot))
        return holder is not None and holder[0] == ROLLED_UP_HOLDER

    async def _claim_released(self, name: str, slot: datetime) -> bool:
        return await self.ledger.claim_holder(claim_key(name, slot)) is None

    async def run(self, run_id: str) -> RunRecord | None:
        """The run ``run_id`` as its caller polls it: its row, or its place in this process's
        line while it waits there unwritten."""
        return await self.ledger.get_run(run_id) or self.waiting_here(lambda r: r.id == run_id)

    def waiting_here(self, match: Callable[[RunRecord], bool]) -> RunRecord | None:
        """A firing waiting in this process's in-process queue line (the memory ledger's: it
        writes no ``queued`` row, its row appears when its turn comes), as its ``queued`` row.
        On a SQLite file an external schedule waits in the durable line, a written row
        (``coordination/sharing.py``)."""
        return next((r for r in self.engine.waiting_here() if match(r)), None)
