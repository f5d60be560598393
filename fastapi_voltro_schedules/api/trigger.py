"""The external trigger: ``POST /_voltro/schedules/{name}/trigger`` and the run it started.

The route parses the arrival's stated time, asks :mod:`fastapi_voltro_schedules.arrivals` what
the arrival means (snap, claim once, duplicates, the missed policy's rows, pauses) and maps its
answer to HTTP — refusals through the one error table (:mod:`.errors`):

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
from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from ..arrivals import Arrival, ArrivalStatus, arrivals_of, arrive
from ..backfill import EARLIEST_INSTANT, LATEST_INSTANT, from_iso
from ..clock import iso_z
from ..errors import (
    FutureArrivalError,
    InvalidArrivalTimeError,
    NotExternallyTriggeredError,
    OffCadenceError,
    PayloadTooLargeError,
    RunNotFoundError,
    ScheduleNotFoundError,
    StoreUnavailableError,
    TooLateArrivalError,
)
from ..records import RunRecord
from .auth import TRIGGER_ERRORS, TriggerAuth, scheduling_of
from .errors import VoltroRoute, error_responses

__all__ = ["RunView", "TriggerAnswer", "arrive", "parse_stated", "router", "within_range"]

router = APIRouter(route_class=VoltroRoute)

VOLTRO_SCHEDULED_AT = "X-Voltro-Scheduled-At"
CLOUD_SCHEDULER_SCHEDULE_TIME = "X-CloudScheduler-ScheduleTime"

RUN_ID_RE = re.compile(r"sr_[0-9a-f]{32}")
"""The shape of every run id the package mints (``store.base.new_run_id``). Anything else
cannot be a run, and is answered 404 without a query (a NUL byte made Postgres' driver fail)."""


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
        return cls(**cls.fields_of(run))

    @staticmethod
    def fields_of(run: RunRecord) -> dict[str, Any]:
        """This view's fields of ``run``, as keyword arguments (a wider view adds its own)."""
        return {
            "run_id": run.id,
            "name": run.name,
            "status": run.status.value,
            "terminal": run.terminal,
            "scheduled_at": iso_z(run.scheduled_at),
            "fired_at": None if run.fired_at is None else iso_z(run.fired_at),
            "finished_at": None if run.finished_at is None else iso_z(run.finished_at),
            "error_tag": run.error_tag,
            "error": run.error_message,
            "traceback": run.error_traceback,
        }


# -- parsing and answering -----------------------------------------------------------------


def parse_stated(header: str, value: str) -> datetime:
    """An ISO-8601 instant with an offset (``Z`` included), as sent by either header. One
    outside the instants the API names (1970–9000) reads as the nearer bound: it is too late,
    or in the future, and is refused as such — not as a malformed header."""
    try:
        stated = from_iso(value)
    except ValueError:
        raise InvalidArrivalTimeError(header, value) from None
    if stated.tzinfo is None or stated.utcoffset() is None:
        raise InvalidArrivalTimeError(header, value)
    return within_range(stated)


def within_range(instant: datetime) -> datetime:
    """An aware ``instant`` held to the instants the API takes (the store's columns and the
    cron arithmetic overflow past them; nothing is scheduled outside them)."""
    try:
        return min(max(instant, EARLIEST_INSTANT), LATEST_INSTANT)
    except OverflowError:  # year 1 with a positive offset is before year 1 in UTC
        return EARLIEST_INSTANT if instant.year < 1970 else LATEST_INSTANT


def answered(arrival: Arrival) -> JSONResponse:
    """An arrival's answer in HTTP: 202 for the one that started the run, 200 for the rest."""
    answer = TriggerAnswer(
        status=arrival.status.value,
        run_id=None if arrival.run is None else arrival.run.id,
        scheduled_at=None if arrival.scheduled_at is None else iso_z(arrival.scheduled_at),
    )
    status_code = 202 if arrival.status is ArrivalStatus.ACCEPTED else 200
    return JSONResponse(answer.model_dump(by_alias=True), status_code=status_code)


# -- routes ---------------------------------------------------------------------------------


def _stated_header(name: str, description: str) -> dict[str, object]:
    # Declared here rather than as `str | None` parameters, which FastAPI publishes as
    # nullable: a header has no null, only absent — and a client generator would offer one.
    return {
        "name": name,
        "in": "header",
        "required": False,
        "description": description,
        "schema": {"type": "string", "format": "date-time"},
    }


STATED_HEADERS = [
    _stated_header(
        VOLTRO_SCHEDULED_AT,
        "The occurrence this arrival is for (ISO-8601 with offset); snapped like the arrival "
        "time would be, and at most external_trigger_skew_ms before the app's clock. Wins "
        "over X-CloudScheduler-ScheduleTime. An instant before 1970 or after 9000 reads as "
        "that bound (too late, or in the future).",
    ),
    _stated_header(
        CLOUD_SCHEDULER_SCHEDULE_TIME,
        "Set by GCP Cloud Scheduler; read like X-Voltro-Scheduled-At.",
    ),
]


@router.post(
    "/_voltro/schedules/{name}/trigger",
    operation_id="triggerSchedule",
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
            PayloadTooLargeError,
            StoreUnavailableError,
            *TRIGGER_ERRORS,
        ),
    },
    openapi_extra={"parameters": STATED_HEADERS},
    dependencies=[TriggerAuth],
)
async def trigger_schedule(name: str, request: Request) -> JSONResponse:
    stated: datetime | None = None
    voltro = request.headers.get(VOLTRO_SCHEDULED_AT)
    cloud = request.headers.get(CLOUD_SCHEDULER_SCHEDULE_TIME)
    if voltro is not None:
        stated = parse_stated(VOLTRO_SCHEDULED_AT, voltro)
    elif cloud is not None:
        stated = parse_stated(CLOUD_SCHEDULER_SCHEDULE_TIME, cloud)
    return answered(await arrive(scheduling_of(request), name, stated))


@router.get(
    "/_voltro/schedules/runs/{run_id}",
    operation_id="getTriggeredRun",
    summary="One run's status (poll until terminal)",
    response_model=RunView,
    responses=error_responses(RunNotFoundError, StoreUnavailableError, *TRIGGER_ERRORS),
    dependencies=[TriggerAuth],
)
async def get_run(run_id: str, request: Request) -> JSONResponse:
    arrivals = arrivals_of(scheduling_of(request))
    if RUN_ID_RE.fullmatch(run_id) is None:
        raise RunNotFoundError(run_id, malformed=True)
    run = await arrivals.run(run_id)
    if run is None:
        raise RunNotFoundError(run_id)
    return JSONResponse(RunView.of(run).model_dump(by_alias=True))
