"""The external trigger: ``POST /_voltro/schedules/{name}/trigger`` and the run it started.

Delivery from a platform scheduler is at-least-once; the firing is not. Each arrival is snapped
onto the schedule's cadence (:func:`fastapi_voltro_schedules.external.snap`) and the occurrence
is claimed in ``_voltro_schedule_claims`` whatever the coordination — on SQLite too — so every
retry, redelivery or twin CronJob of one firing, on any replica, resolves to one run:

* the first arrival: ``202 {"status": "accepted", "runId", "scheduledAt"}`` as soon as the run
  row exists; the handler runs in the background and the caller polls
  ``GET /_voltro/schedules/runs/{runId}`` until ``terminal``;
* any later one: ``200 {"status": "duplicate", "runId", "scheduledAt"}`` with the *first* run's
  id (also when the slot was recorded ``missed`` by the missed policy: that row's id);
* the first arrival while a run of the schedule is still live under ``on_overlap="skip"``:
  ``200 {"status": "skipped", "runId", "scheduledAt"}`` — the skipped row, terminal at once;
* any arrival while an operator paused the schedule (or, after the resume, for an occurrence
  inside the paused span): ``200 {"status": "paused", "runId": null, "scheduledAt"}`` — nothing
  claimed, nothing recorded, and the CronJob exits 0 (:mod:`fastapi_voltro_schedules.pauses`).
"""

from __future__ import annotations

import re
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Literal

import anyio
from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from ..backfill import INSTANT_RANGE, from_iso, out_of_range
from ..clock import iso_z
from ..coordination import Verdict
from ..enums import Trigger, TriggerMode
from ..errors import (
    FutureArrivalError,
    InvalidArrivalTimeError,
    NotExternallyTriggeredError,
    OffCadenceError,
    RunNotFoundError,
    ScheduleNotFoundError,
    SchedulerNotRunningError,
    StoreUnavailableError,
    TooLateArrivalError,
)
from ..external import FUTURE_TOLERANCE, SnapVerdict, snap
from ..logs import logger
from ..models import claim_key
from ..store import RunRecord
from .auth import TriggerAuth, scheduling_of
from .errors import VoltroRoute, error_responses

if TYPE_CHECKING:
    from ..definition import Schedule
    from ..engine import Engine
    from ..scheduling import Scheduling

router = APIRouter(route_class=VoltroRoute, tags=["voltro schedules"])

VOLTRO_SCHEDULED_AT = "X-Voltro-Scheduled-At"
CLOUD_SCHEDULER_SCHEDULE_TIME = "X-CloudScheduler-ScheduleTime"

RUN_ID_RE = re.compile(r"sr_[0-9a-f]{32}")
"""The shape of every run id the package mints (``store.base.new_run_id``). Anything else
cannot be a run, and is answered 404 without a query (a NUL byte made Postgres' driver fail)."""

DUPLICATE_WAIT_SECONDS = 5.0
"""How long a duplicate waits for the first arrival's run row. The winner inserts its row
right after its claim commits, so this only matters under a stalled database."""
DUPLICATE_POLL_SECONDS = 0.05


class _Camel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class TriggerAnswer(_Camel):
    """What the trigger route answers."""

    status: Literal["accepted", "duplicate", "skipped", "paused"] = Field(
        description="accepted (202): this arrival started the run; duplicate (200): the "
        "occurrence was already claimed — runId is the first run's; skipped (200): a run of "
        "the schedule was still live (on_overlap='skip'), a skipped row was recorded; paused "
        "(200): an operator paused the schedule — nothing ran, runId is null."
    )
    run_id: str | None = Field(description="Poll GET /_voltro/schedules/runs/{runId}.")
    scheduled_at: str | None = Field(
        description="The occurrence the arrival snapped to (ISO-8601 Z); null only for a "
        "paused schedule's arrival that matches no occurrence."
    )


class RunView(_Camel):
    """One run, as a platform scheduler polls it."""

    run_id: str
    name: str
    status: str = Field(description="queued|running|succeeded|failed|skipped|missed")
    terminal: bool = Field(description="true once the row will never change again")
    scheduled_at: str
    fired_at: str | None
    finished_at: str | None
    error_tag: str | None
    error: str | None
    traceback: str | None = Field(
        default=None,
        description="A failed run's traceback (bounded: the last frames and the exception).",
    )

    @classmethod
    def of(cls, run: RunRecord) -> RunView:
        return cls(
            run_id=run.id,
            name=run.name,
            status=run.status.value,
            terminal=run.terminal,
            scheduled_at=iso_z(run.scheduled_at),
            fired_at=None if run.fired_at is None else iso_z(run.fired_at),
            finished_at=None if run.finished_at is None else iso_z(run.finished_at),
            error_tag=run.error_tag,
            error=run.error_message,
            traceback=run.error_traceback,
        )


# -- the domain operation -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Arrival:
    """What one accepted arrival became."""

    status: Literal["accepted", "duplicate", "skipped", "paused"]
    scheduled_at: datetime | None
    run: RunRecord | None


def parse_stated(header: str, value: str) -> datetime:
    """An ISO-8601 instant with an offset (``Z`` included), as sent by either header."""
    try:
        stated = from_iso(value)
    except ValueError:
        raise InvalidArrivalTimeError(header, value) from None
    if stated.tzinfo is None or stated.utcoffset() is None:
        raise InvalidArrivalTimeError(header, value)
    if out_of_range(stated):
        raise InvalidArrivalTimeError(
            header, value, f"is outside the instants this API takes ({INSTANT_RANGE})"
        )
    return stated


async def arrive(scheduling: Scheduling, name: str, stated: datetime | None = None) -> Arrival:
    """Snap, claim and (when first) start one external arrival for schedule ``name``.

    Raises the refusals (404 / 409 / 503 in the router's mapping); nothing is claimed then.
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
    engine = scheduling.engine
    if engine is None:
        raise SchedulerNotRunningError("the scheduler is not running (starting or shutting down)")
    now = scheduling.clock.now()
    config = scheduling.config
    plan = snap(schedule.spec, stated or now, now, config.external_trigger_skew_ms)
    if (await scheduling.current_pauses()).holds(name, plan.scheduled_at or plan.reference):
        return Arrival("paused", plan.scheduled_at, None)
    facts: dict[str, object] = {
        "name": name,
        "cron": schedule.cron,
        "timezone": schedule.timezone,
        "reference": iso_z(plan.reference),
        "stated": stated is not None,
        "skewBudgetMs": int(plan.budget.total_seconds() * 1000),
    }
    if plan.verdict is SnapVerdict.FUTURE:
        raise FutureArrivalError(
            f'schedule "{name}": the arrival states {iso_z(plan.reference)}, which is after '
            f"the app's clock ({iso_z(now)}) by more than "
            f"{int(FUTURE_TOLERANCE.total_seconds())} s — an occurrence is claimed only once "
            "it is due, or the real firing would be swallowed as a duplicate",
            now=iso_z(now),
            **facts,
        )
    if plan.verdict is SnapVerdict.TOO_LATE:
        late_ms = int((now - plan.reference).total_seconds() * 1000)
        raise TooLateArrivalError(
            f'schedule "{name}": the arrival states {iso_z(plan.reference)}, {late_ms} ms '
            f"before the app's clock ({iso_z(now)}) — more than the skew budget of "
            f"{config.external_trigger_skew_ms} ms (VOLTRO_EXTERNAL_TRIGGER_SKEW_MS), so "
            "nothing was fired: a replay of an old firing never runs its slot (again). If "
            "deliveries really arrive this late, raise VOLTRO_EXTERNAL_TRIGGER_SKEW_MS; if "
            "the caller's clock is behind, fix its time sync",
            now=iso_z(now),
            lateByMs=late_ms,
            **{**facts, "skewBudgetMs": config.external_trigger_skew_ms},
        )
    if plan.verdict is SnapVerdict.OFF_CADENCE or plan.scheduled_at is None:
        newest = "none in the last 5 years" if plan.previous is None else iso_z(plan.previous)
        raise OffCadenceError(
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
    slot = plan.scheduled_at
    return await _answered_once(
        engine, name, slot, lambda: _claim(scheduling, engine, schedule, slot)
    )


class _Answering:
    """An occurrence whose arrival this process is answering right now."""

    __slots__ = ("answer", "done")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.answer: Arrival | None = None


ANSWERED_KEPT = 512
"""Occurrences per engine whose run this process remembers (the newest answered)."""


class _Occurrences:
    """One running engine's arrivals in this process: the occurrences being answered, and the
    run each recently answered occurrence resolved to. That run never changes — every later
    arrival of the occurrence is its ``duplicate`` — so a retry storm's latecomers are answered
    from here, without a read each (a storm's reads queued on the connection pool)."""

    __slots__ = ("answered", "answering")

    def __init__(self) -> None:
        self.answering: dict[tuple[str, datetime], _Answering] = {}
        self.answered: OrderedDict[tuple[str, datetime], RunRecord] = OrderedDict()

    def remember(self, key: tuple[str, datetime], answer: Arrival) -> None:
        if answer.run is None:  # paused, or nothing recorded: the next arrival asks again
            return
        self.answered[key] = answer.run
        if len(self.answered) > ANSWERED_KEPT:
            self.answered.popitem(last=False)


_OCCURRENCES: weakref.WeakKeyDictionary[Engine, _Occurrences] = weakref.WeakKeyDictionary()
"""Per running engine (a new engine, after a restart, starts with none)."""


async def _answered_once(
    engine: Engine, name: str, slot: datetime, claim: Callable[[], Awaitable[Arrival]]
) -> Arrival:
    """Arrivals of one occurrence at once in this process (a retry storm, twin CronJobs) are
    answered by the first of them: it claims, the rest wait for its answer and are its
    duplicates — one claim and one lookup per replica instead of one each — and so are the
    arrivals after it. When the first answered nothing with a run (paused, or it failed), each
    of the rest answers for itself."""
    occurrences = _OCCURRENCES.get(engine)
    if occurrences is None:
        occurrences = _OCCURRENCES[engine] = _Occurrences()
    key = (name, slot)
    known = occurrences.answered.get(key)
    if known is not None:
        return Arrival("duplicate", slot, known)
    first = occurrences.answering.get(key)
    if first is not None:
        await first.done.wait()
        if first.answer is not None and first.answer.run is not None:
            return Arrival("duplicate", slot, first.answer.run)
        answer = await claim()
        occurrences.remember(key, answer)
        return answer
    mine = occurrences.answering[key] = _Answering()
    try:
        mine.answer = await claim()
        occurrences.remember(key, mine.answer)
        return mine.answer
    finally:
        del occurrences.answering[key]
        mine.done.set()


async def _claim(
    scheduling: Scheduling, engine: Engine, schedule: Schedule, slot: datetime
) -> Arrival:
    """Claim ``slot`` for ``schedule`` and start its run, or find the run that claimed it."""
    name = schedule.name
    # A retry of an occurrence already recorded is answered from the ledger without a write:
    # its claim could only lose, and on SQLite that write queues behind every other writer.
    recorded = await _recorded_run(scheduling, name, slot)
    if recorded is not None:
        return Arrival("duplicate", slot, recorded)
    # Answered as soon as the firing's row exists: a queued firing waits its turn in the
    # background, never in the request.
    for _ in range(2):
        admission = (await engine.submit(schedule, slot, Trigger.EXTERNAL)).admission
        if admission.verdict in (Verdict.RUN, Verdict.QUEUED) and admission.run is not None:
            return Arrival("accepted", slot, admission.run)
        if admission.verdict is Verdict.SKIPPED:
            return Arrival("skipped", slot, admission.run)
        if admission.verdict is Verdict.PAUSED:  # paused between the check above and the claim
            return Arrival("paused", slot, None)
        if admission.verdict is not Verdict.LOST:
            break
        run = await first_run(scheduling, name, slot)
        if run is not None:
            return Arrival("duplicate", slot, run)
        # Claimed, no row, and the claim is gone now: its holder failed to record the firing
        # (the store blinked) and released it, so this arrival may run the slot after all.
        if await _claim_released(scheduling, name, slot) is False:
            return Arrival("duplicate", slot, None)
    raise StoreUnavailableError(
        f'schedule "{name}": the ledger could not be written — nothing was fired; retry'
    )


async def first_run(scheduling: Scheduling, name: str, slot: datetime) -> RunRecord | None:
    """The run the first arrival recorded for ``slot`` — polled briefly, because the winner
    (maybe on another replica) may not have inserted its row yet. Real time, not the
    scheduler's clock: this waits on another transaction, not on the schedule."""
    store = scheduling.store
    if store is None:
        raise SchedulerNotRunningError("the scheduler is not running (starting or shutting down)")
    polls = 0
    with anyio.move_on_after(DUPLICATE_WAIT_SECONDS):
        while True:
            run = await _recorded_run(scheduling, name, slot)
            if run is not None:
                return run
            run = _waiting_here(scheduling, lambda r: r.name == name and r.scheduled_at == slot)
            if run is not None:
                return run
            polls += 1
            if polls % 10 == 0 and await store.claim_holder(claim_key(name, slot)) is None:
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


async def _recorded_run(scheduling: Scheduling, name: str, slot: datetime) -> RunRecord | None:
    """The row an earlier arrival (or the in-app fallback) recorded for ``slot``, if any."""
    store = scheduling.store
    if store is None:
        raise SchedulerNotRunningError("the scheduler is not running (starting or shutting down)")
    schedule = scheduling.get(name)
    # A slot the in-app fallback fired holds a trigger="self" row under the same claim.
    triggers: tuple[Trigger, ...] = (Trigger.EXTERNAL,)
    if schedule is not None and schedule.fallback is not None:
        triggers = (Trigger.EXTERNAL, Trigger.SELF)
    for trigger in triggers:
        run = await store.run_for_slot(name, slot, trigger)
        if run is not None:
            return run
    return None


async def _claim_released(scheduling: Scheduling, name: str, slot: datetime) -> bool:
    store = scheduling.store
    return store is not None and await store.claim_holder(claim_key(name, slot)) is None


def _waiting_here(scheduling: Scheduling, match: Callable[[RunRecord], bool]) -> RunRecord | None:
    """A firing waiting in this process's in-process queue line (the memory ledger's: it writes
    no ``queued`` row, its row appears when its turn comes), as its ``queued`` row. On a SQLite
    file an external schedule waits in the durable line, a written row (``coordination/
    sharing.py``)."""
    engine = scheduling.engine
    if engine is None:
        return None
    return next((r for r in engine.waiting_here() if match(r)), None)


# -- routes ---------------------------------------------------------------------------------


@router.post(
    "/_voltro/schedules/{name}/trigger",
    summary="Fire an external schedule (platform schedulers call this)",
    status_code=202,
    response_model=TriggerAnswer,
    responses={
        200: {"model": TriggerAnswer, "description": "Duplicate, skipped or paused arrival"},
        **error_responses(
            InvalidArrivalTimeError,
            ScheduleNotFoundError,
            OffCadenceError,
            FutureArrivalError,
            TooLateArrivalError,
            NotExternallyTriggeredError,
            StoreUnavailableError,
        ),
        401: {"description": "Missing or wrong bearer token"},
    },
    dependencies=[TriggerAuth],
)
async def trigger_schedule(
    name: str,
    request: Request,
    x_voltro_scheduled_at: Annotated[
        str | None,
        Header(
            alias=VOLTRO_SCHEDULED_AT,
            description="The occurrence this arrival is for (ISO-8601 with offset); snapped "
            "like the arrival time would be, and at most external_trigger_skew_ms before the "
            "app's clock. Wins over X-CloudScheduler-ScheduleTime.",
            json_schema_extra={"format": "date-time"},
        ),
    ] = None,
    x_cloudscheduler_scheduletime: Annotated[
        str | None,
        Header(
            alias=CLOUD_SCHEDULER_SCHEDULE_TIME,
            description="Set by GCP Cloud Scheduler; read like X-Voltro-Scheduled-At.",
            json_schema_extra={"format": "date-time"},
        ),
    ] = None,
) -> JSONResponse:
    stated: datetime | None = None
    if x_voltro_scheduled_at is not None:
        stated = parse_stated(VOLTRO_SCHEDULED_AT, x_voltro_scheduled_at)
    elif x_cloudscheduler_scheduletime is not None:
        stated = parse_stated(CLOUD_SCHEDULER_SCHEDULE_TIME, x_cloudscheduler_scheduletime)
    arrival = await arrive(scheduling_of(request), name, stated)
    answer = TriggerAnswer(
        status=arrival.status,
        run_id=None if arrival.run is None else arrival.run.id,
        scheduled_at=None if arrival.scheduled_at is None else iso_z(arrival.scheduled_at),
    )
    return JSONResponse(
        answer.model_dump(by_alias=True),
        status_code=202 if arrival.status == "accepted" else 200,
    )


@router.get(
    "/_voltro/schedules/runs/{run_id}",
    summary="One run's status (poll until terminal)",
    response_model=RunView,
    responses={
        **error_responses(RunNotFoundError, StoreUnavailableError),
        401: {"description": "Missing or wrong bearer token"},
    },
    dependencies=[TriggerAuth],
)
async def get_run(run_id: str, request: Request) -> JSONResponse:
    store = scheduling_of(request).store
    if store is None:
        raise SchedulerNotRunningError("the scheduler is not running (starting or shutting down)")
    if RUN_ID_RE.fullmatch(run_id) is None:
        raise RunNotFoundError(run_id, malformed=True)
    run = await store.get_run(run_id) or _waiting_here(
        scheduling_of(request), lambda r: r.id == run_id
    )
    if run is None:
        raise RunNotFoundError(run_id)
    return JSONResponse(RunView.of(run).model_dump(by_alias=True))
