"""The inspect API behind the inspect token: schedules, run history, Run now, range backfill.

The dashboard is a thin client over exactly these routes. What they answer and accept is
:mod:`.inspect_models`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any, Literal

import anyio
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import WithJsonSchema

from ..backfill import RangePlan, RangeSummary, check_limit, parse_instant
from ..clock import iso_z
from ..enums import TriggerMode
from ..errors import (
    BackfillRefusedError,
    BackfillRequestError,
    BackfillStoppedError,
    InvalidQueryError,
    PauseRequestError,
    PauseUntilPassedError,
    PayloadTooLargeError,
    RunNowBusyError,
    ScheduleNotFoundError,
    SchedulePausedError,
    SchedulerShuttingDownError,
    StoreUnavailableError,
    VoltroError,
)
from ..listing import CURSOR_PATTERN as LISTING_CURSOR_PATTERN
from ..listing import MAX_CURSOR_CHARS as LISTING_CURSOR_CHARS
from ..listing import MAX_PAGE, ListingFilter
from ..listing import decode_cursor as decode_listing_cursor
from ..logs import logger
from ..records import Latest
from ..runtime_schedules import RUNTIME_SOURCE
from .auth import (
    OPERATOR_ERRORS,
    READ_ERRORS,
    InspectAuth,
    OperatorAuth,
    OperatorRole,
    engine_of,
    scheduling_of,
)
from .errors import (
    MAX_BODY_BYTES,
    VoltroRoute,
    error_responses,
    public_detail,
    read_body,
    status_of,
)
from .inspect_models import (
    CURSOR_PATTERN,
    LISTING_STATUS_PATTERN,
    MAX_CURSOR_CHARS,
    STATUS_FILTER_PATTERN,
    BackfillRequest,
    FireAnswer,
    InspectRunView,
    PauseAllAnswer,
    PauseAllRequest,
    PauseAnswer,
    PauseRequest,
    PauseView,
    RetryView,
    RollupView,
    RunPage,
    ScheduleDetail,
    ScheduleList,
    ScheduleView,
    VersionView,
    backfill_request,
    decode_cursor,
    encode_cursor,
    parse_outcomes,
    parse_statuses,
    query_instant,
    range_instant,
)

if TYPE_CHECKING:
    from ..definition import Schedule
    from ..pauses import PauseView as PauseLookup
    from ..scheduling import Scheduling

router = APIRouter(route_class=VoltroRoute, dependencies=[InspectAuth])

INSPECT_PREFIX = "/_voltro/inspect/schedules"


@router.get(
    INSPECT_PREFIX,
    operation_id="listSchedules",
    summary="Schedules, effective coordination, next firing, last run, pause — by page",
    description="Schedules in name order, `limit` at a time (default and most: "
    f"{MAX_PAGE}); follow `nextCursor` until it is null. Filters (all given at once): `prefix` "
    "of the name, `status` (the newest outcome: each schedule's finished run with the newest "
    "slot), `paused`, `source` (code | runtime). A page reads only its own schedules' runs.",
    response_model=ScheduleList,
    responses=error_responses(InvalidQueryError, StoreUnavailableError, *READ_ERRORS),
)
async def list_schedules(
    request: Request,
    prefix: Annotated[
        str | None,
        Query(description="Only names starting with this text (matched literally)."),
        WithJsonSchema({"type": "string"}),
    ] = None,
    status: Annotated[
        list[str] | None,
        Query(
            description="succeeded|failed|skipped|missed: the newest outcome is one of these; "
            "repeat the parameter or separate with commas (empty: no filter)."
        ),
        WithJsonSchema(
            {"type": "array", "items": {"type": "string", "pattern": LISTING_STATUS_PATTERN}}
        ),
    ] = None,
    paused: Annotated[
        bool | None,
        Query(description="true: only paused schedules; false: only the others."),
        WithJsonSchema({"type": "boolean"}),
    ] = None,
    source: Annotated[
        Literal["code", "runtime"] | None,
        Query(description="code (declared with define_schedule) | runtime (written at run time)"),
        WithJsonSchema({"type": "string", "enum": ["code", "runtime"]}),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = MAX_PAGE,
    cursor: Annotated[
        str | None,
        Query(description="The nextCursor of the previous page (empty or omitted: the first)."),
        WithJsonSchema(
            {
                "type": "string",
                "pattern": LISTING_CURSOR_PATTERN,
                "maxLength": LISTING_CURSOR_CHARS,
            }
        ),
    ] = None,
) -> ScheduleList:
    scheduling = scheduling_of(request)
    filters = ListingFilter(
        prefix=prefix or None, statuses=parse_outcomes(status), paused=paused, source=source
    )
    position = decode_listing_cursor(cursor or "")
    page, next_cursor = await scheduling.schedule_page(filters, position, limit)
    store = scheduling.store
    # one statement for both runs of each schedule (one snapshot: never "running" beside a
    # newest run that already shows it ended), the outcomes in the same transaction
    latest = await store.latest([s.name for s in page]) if store is not None else NOTHING_YET
    now = scheduling.clock.now()
    pauses = await scheduling.current_pauses()
    fleet = pauses.fleet()
    return ScheduleList(
        coordination=scheduling.effective_coordination.value,
        replica_id=scheduling.config.replica_id,
        fires_here=scheduling.fires_here,
        now=iso_z(now),
        pause_all=None if fleet is None else PauseView.of(fleet),
        schedules=[schedule_view(scheduling, s, latest, pauses, now) for s in page],
        next_cursor=next_cursor,
    )


NOTHING_YET = Latest({}, {}, {})
"""Before the scheduler runs there is no ledger to read: no schedule has a run."""


def schedule_view(
    scheduling: Scheduling,
    schedule: Schedule,
    latest: Latest,
    pauses: PauseLookup,
    now: datetime,
) -> ScheduleView:
    """One schedule as the listing (and the detail and write routes) shows it, with its runs
    and outcome looked up in ``latest`` (:meth:`~..store.base.Store.latest`)."""
    name = schedule.name
    previous = latest.last.get(name)  # its newest clock-driven run
    newest = latest.newest.get(name)  # its newest run of any trigger
    outcome = latest.outcomes.get(name)
    engine = scheduling.engine
    trigger = scheduling.trigger_of(schedule)
    next_firing = engine.next_firing(schedule.name) if engine is not None else None
    # External schedules arm no timer, and neither does a process that is not the firer of
    # its SQLite file: the cron still says when the slot comes.
    if next_firing is None and (trigger is TriggerMode.EXTERNAL or not scheduling.fires_here):
        next_firing = schedule.next_occurrence(now)
    runtime = schedule.source == RUNTIME_SOURCE
    pause = pauses.get(schedule.name)
    if pause is not None and not pause.active:
        pause = None
    if pause is not None:
        next_firing = None  # nothing fires until resumed
    last_view = None if previous is None else InspectRunView.of(previous)
    # most schedules' newest run is their newest clock-driven one: one view for both
    same = newest is not None and previous is not None and newest.id == previous.id
    newest_view = last_view if same else None if newest is None else InspectRunView.of(newest)
    return ScheduleView(
        name=schedule.name,
        cron=schedule.cron,
        timezone=schedule.timezone,
        trigger=trigger.value,
        on_overlap=schedule.on_overlap.value,
        backfill=schedule.backfill.value,
        max_runtime_ms=schedule.max_runtime_ms,
        description=schedule.description,
        next_firing=None if next_firing is None else iso_z(next_firing),
        last_run=last_view,
        newest_run=newest_view,
        paused=pause is not None,
        pause=None if pause is None else PauseView.of(pause),
        source=schedule.source,
        handler=schedule.handler_ref if runtime else None,
        args=dict(schedule.args) if runtime else None,
        retry=RetryView.of(schedule.retry),
        exclude=schedule.exclude.wire() if schedule.exclude else None,
        record=schedule.record.value,
        last_status=None if outcome is None else outcome.status.value,
    )


@router.get(
    f"{INSPECT_PREFIX}/runs",
    operation_id="listRuns",
    summary="Firing history, newest first, filtered by schedule and status, paged by cursor",
    response_model=RunPage,
    responses=error_responses(
        ScheduleNotFoundError, InvalidQueryError, StoreUnavailableError, *READ_ERRORS
    ),
)
async def list_runs(
    request: Request,
    # Each optional parameter's schema is given whole: FastAPI would publish `str | None` as
    # nullable, and a query parameter has no null, only absent.
    name: Annotated[
        str | None,
        Query(description="One schedule; all when omitted."),
        WithJsonSchema({"type": "string"}),
    ] = None,
    status: Annotated[
        list[str] | None,
        Query(
            description="queued|running|succeeded|failed|skipped|missed; repeat the "
            "parameter or separate with commas (empty: no filter)."
        ),
        WithJsonSchema(
            {"type": "array", "items": {"type": "string", "pattern": STATUS_FILTER_PATTERN}}
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[
        str | None,
        Query(
            description="The nextCursor of the previous page (empty or omitted: the newest page)."
        ),
        WithJsonSchema(
            {"type": "string", "pattern": CURSOR_PATTERN, "maxLength": MAX_CURSOR_CHARS}
        ),
    ] = None,
    before: Annotated[
        str | None,
        Query(
            description="Older paging: only runs scheduled before this instant (ISO-8601 with "
            "a zone; one before 1970 or after 9000 reads as that bound)."
        ),
        WithJsonSchema({"type": "string", "format": "date-time"}),
    ] = None,
) -> RunPage:
    scheduling = scheduling_of(request)
    if name is not None and scheduling.get(name) is None:
        raise ScheduleNotFoundError(name)
    statuses = parse_statuses(status)
    before_at: datetime | None = None
    before_id: str | None = None
    if cursor:
        before_at, before_id = decode_cursor(cursor)
    elif before is not None:
        before_at = query_instant(before, "before")
    runs = await scheduling.running_store().list_runs(
        name, limit=limit + 1, before=before_at, before_id=before_id, statuses=statuses
    )
    page, more = runs[:limit], len(runs) > limit
    return RunPage(
        runs=[InspectRunView.of(r) for r in page],
        next_cursor=encode_cursor(page[-1]) if more else None,
    )


@router.get(
    f"{INSPECT_PREFIX}/{{name}}",
    operation_id="getSchedule",
    summary="One schedule as the listing shows it, with its definition versions",
    response_model=ScheduleDetail,
    responses=error_responses(ScheduleNotFoundError, StoreUnavailableError, *READ_ERRORS),
)
async def get_schedule(request: Request, name: str) -> ScheduleDetail:
    scheduling = scheduling_of(request)
    schedule = scheduling.get(name)
    if schedule is None:
        raise ScheduleNotFoundError(name)
    store = scheduling.running_store()
    latest = await store.latest([name])
    versions = (await store.definitions([name])).get(name, [])
    now = scheduling.clock.now()
    # the last 48 hours of counts (a schedule that stopped rolling up keeps its old hours)
    hours = await store.rollups([name], now - ROLLUP_HOURS_SHOWN, now, limit=48)
    view = schedule_view(scheduling, schedule, latest, await scheduling.current_pauses(), now)
    return ScheduleDetail(
        **view.model_dump(),
        versions=[VersionView.of(v) for v in versions],
        rollups=[RollupView.of(r) for r in hours],
    )


ROLLUP_HOURS_SHOWN = timedelta(hours=48)


@router.post(
    f"{INSPECT_PREFIX}/{{name}}/fire",
    status_code=202,
    operation_id="fireSchedule",
    summary="Run now (always runs, trigger=manual)",
    response_model=FireAnswer,
    responses=error_responses(
        ScheduleNotFoundError,
        SchedulePausedError,
        RunNowBusyError,
        PayloadTooLargeError,
        StoreUnavailableError,
        SchedulerShuttingDownError,
        *OPERATOR_ERRORS,
    ),
    dependencies=[OperatorAuth],
)
async def fire(name: str, request: Request) -> FireAnswer:
    scheduling = scheduling_of(request)
    engine_of(scheduling)  # 503 when stopped, before the name is looked up
    run = await scheduling.fire_now(name)
    return FireAnswer(status="accepted", run_id=run.id, scheduled_at=iso_z(run.scheduled_at))


@router.post(
    f"{INSPECT_PREFIX}/{{name}}/backfill",
    operation_id="backfillSchedule",
    summary="Range backfill: the occurrences in (from, to] `reprocess` says, in order, as "
    "manual runs",
    description="Refusals answer 409 with the count and the reason and fire nothing. Accepted "
    "ranges stream NDJSON: one `progress` line per slot fired, then a `summary` line. "
    "`reprocess` (none|failed|all, default none) says which slots that already have an "
    "outcome run again; `dryRun: true` answers one JSON object listing each slot with its "
    "current status, and writes nothing. A range with `to` not after `from` holds no "
    "occurrence: its answer is the summary alone, counting 0 (a dry run: no slot). An instant "
    "before 1970 or after 9000 reads as that bound. The body is at most "
    f"{MAX_BODY_BYTES:,} bytes (413 above).",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": BackfillRequest.model_json_schema(by_alias=True)}
            },
        }
    },
    dependencies=[OperatorAuth],
    responses={
        **error_responses(
            BackfillRequestError,
            BackfillRefusedError,
            SchedulePausedError,
            ScheduleNotFoundError,
            PayloadTooLargeError,
            StoreUnavailableError,
            *OPERATOR_ERRORS,
        ),
        200: {
            "description": "NDJSON stream of progress lines, then a summary line (a dry "
            "run: one JSON object)",
            "content": {"application/x-ndjson": {}, "application/json": {}},
        },
    },
)
async def backfill(name: str, request: Request) -> Response:
    # The body is read here, after the router's token dependency ran: FastAPI reads a declared
    # body parameter before any dependency, so unauthenticated posts were parsed whole.
    scheduling = scheduling_of(request)
    engine_of(scheduling)  # 503 when stopped (plan_backfill would say "call this inside run")
    body = backfill_request(await read_body(request))
    start, end = range_instant(body.start, "from"), range_instant(body.end, "to")
    check_limit(body.limit)  # a bad limit is bad input, whatever the range holds
    if end <= start:
        # (from, to] holds no instant: nothing to plan, refuse or fire — but the name still
        # has to be a schedule.
        if scheduling.get(name) is None:
            raise ScheduleNotFoundError(name)
        if body.dry_run:
            return JSONResponse(
                {"name": name, "dryRun": True, "from": iso_z(start), "to": iso_z(end),
                 "reprocess": body.reprocess, "count": 0, "alreadySucceeded": 0,
                 "toRun": 0, "kept": 0, "slots": []}
            )  # fmt: skip
        empty = RangeSummary(schedule=name, count=0, already_succeeded=0)
        return StreamingResponse(
            iter([(json.dumps({"event": "summary", **_summary(empty)}) + "\n").encode()]),
            media_type="application/x-ndjson",
        )
    # Every refusal (a range of this schedule already running too) answers here, up front.
    plan = await scheduling.plan_backfill(
        name,
        start,
        end,
        confirm=body.confirm,
        limit=body.limit,
        reprocess=body.reprocess,
        dry_run=body.dry_run,
    )
    if plan.dry_run:
        return JSONResponse(dry_run_answer(plan))
    send, receive = anyio.create_memory_object_stream[dict[str, Any]](max_buffer_size=16)
    gone = anyio.Event()

    async def emit(event: dict[str, Any]) -> None:
        if gone.is_set():
            return
        try:
            await send.send(event)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            gone.set()  # the client went away: the range stops after the slot in flight

    async def produce() -> None:
        # Runs in the scheduler's task group, not the request's: a client that disconnects
        # cancels the request, and must not cancel the slot in flight with it (that slot
        # would read failed/shutdown while the app runs on). The range sees `gone` and stops
        # cleanly after that slot instead.
        async with send:

            async def progress(summary: RangeSummary) -> None:
                await emit({"event": "progress", **_summary(summary)})

            try:
                summary = await scheduling.run_backfill(plan, progress=progress, stop=gone)
            except VoltroError as error:  # refused (another range started), or stopped
                await emit(_error_event(error))
                return
            except Exception:  # never a silent break: say so, then log it
                logger.exception("schedule: range backfill failed  name=%s", plan.schedule)
                detail = "the range backfill failed — its error is in the app's log"
                await emit({"event": "error", "code": "error", "detail": detail})
                return
            await emit({"event": "summary", **_summary(summary)})

    scheduling.spawn_request_work_under_scheduler(produce)

    async def lines() -> AsyncIterator[bytes]:
        try:
            async with receive:
                async for event in receive:
                    yield (json.dumps(event) + "\n").encode()
        finally:
            gone.set()

    return StreamingResponse(lines(), media_type="application/x-ndjson")


@router.post(
    f"{INSPECT_PREFIX}/{{name}}/pause",
    operation_id="pauseSchedule",
    summary="Pause a schedule on every replica",
    description="Nothing fires and nothing is recorded until resumed; external arrivals answer "
    '200 {"status":"paused","runId":null}; Run now and range backfills answer 409 paused. '
    "Idempotent: pausing a paused schedule keeps its first who/when/reason.",
    response_model=PauseAnswer,
    responses=error_responses(
        ScheduleNotFoundError, PayloadTooLargeError, StoreUnavailableError, *OPERATOR_ERRORS
    ),
)
async def pause(
    name: str, request: Request, role: OperatorRole, body: PauseRequest | None = None
) -> PauseAnswer:
    scheduling = scheduling_of(request)
    before = (await scheduling.current_pauses()).own(name)
    reason = None if body is None else body.reason
    record = await scheduling.pause(name, by=role.value, reason=reason)
    changed = before is None or not before.active
    return PauseAnswer(
        name=name, paused=True, changed=changed, pause=PauseView.of(record), resumed_at=None
    )


@router.post(
    f"{INSPECT_PREFIX}/{{name}}/resume",
    operation_id="resumeSchedule",
    summary="Resume a paused schedule from its next occurrence",
    description="The paused span is not caught up: the next occurrence fires, and neither the "
    "boot backfill nor the external missed policy replays or records the span.",
    response_model=PauseAnswer,
    responses=error_responses(
        ScheduleNotFoundError, PayloadTooLargeError, StoreUnavailableError, *OPERATOR_ERRORS
    ),
)
async def resume(name: str, request: Request, role: OperatorRole) -> PauseAnswer:
    scheduling = scheduling_of(request)
    before = (await scheduling.current_pauses()).own(name)
    record = await scheduling.resume(name, by=role.value)
    changed = before is not None and before.active
    resumed_at = None if record is None or record.resumed_at is None else iso_z(record.resumed_at)
    return PauseAnswer(name=name, paused=False, changed=changed, pause=None, resumed_at=resumed_at)


PAUSE_ALL_PATH = "/_voltro/inspect/pause-all"
RESUME_ALL_PATH = "/_voltro/inspect/resume-all"


@router.post(
    PAUSE_ALL_PATH,
    operation_id="pauseAll",
    summary="Pause every schedule on every replica (a maintenance window)",
    description="Every schedule — run-time ones written during the window too — fires nothing "
    "and records nothing until resume-all, or until `until` (after which every replica fires "
    "again by itself; a slot at exactly `until` is inside the window). Nothing inside the "
    "window is replayed. Run now and range backfills answer 409 paused meanwhile. Idempotent: "
    "a window in force keeps its who/when/why and takes the new `until`. Schedules paused on "
    "their own stay paused after it.",
    response_model=PauseAllAnswer,
    responses=error_responses(
        PauseRequestError,
        PauseUntilPassedError,
        PayloadTooLargeError,
        StoreUnavailableError,
        *OPERATOR_ERRORS,
    ),
)
async def pause_all(
    request: Request, role: OperatorRole, body: PauseAllRequest | None = None
) -> PauseAllAnswer:
    scheduling = scheduling_of(request)
    engine_of(scheduling)  # 503 when stopped
    until: datetime | None = None
    if body is not None and body.until is not None:
        try:
            until = parse_instant(body.until, "until")
        except BackfillRequestError as error:  # the parser is the backfill's; the code is ours
            raise PauseRequestError(str(error)) from None
    before = (await scheduling.current_pauses()).fleet()
    reason = None if body is None else body.reason
    record = await scheduling.pause_all(by=role.value, reason=reason, until=until)
    fleet = (await scheduling.current_pauses()).fleet()
    return PauseAllAnswer(
        paused=fleet is not None,
        changed=before is None,
        pause=PauseView.of(fleet if fleet is not None else record),
        resumed_at=None,
    )


@router.post(
    RESUME_ALL_PATH,
    operation_id="resumeAll",
    summary="End the fleet-wide pause: every schedule fires from its next occurrence",
    description="The window is not caught up: neither the live timer nor the boot backfill nor "
    "the external missed policy replays or records it. Schedules paused on their own stay "
    "paused.",
    response_model=PauseAllAnswer,
    responses=error_responses(StoreUnavailableError, *OPERATOR_ERRORS, validation=False),
)
async def resume_all(request: Request, role: OperatorRole) -> PauseAllAnswer:
    scheduling = scheduling_of(request)
    engine_of(scheduling)
    before = (await scheduling.current_pauses()).fleet()
    record = await scheduling.resume_all(by=role.value)
    resumed_at = None if record is None or record.resumed_at is None else iso_z(record.resumed_at)
    return PauseAllAnswer(
        paused=False, changed=before is not None, pause=None, resumed_at=resumed_at
    )


def _error_event(error: VoltroError) -> dict[str, Any]:
    _, code = status_of(error)
    # No driver text in a stream either: a store failure's detail is the fixed sentence.
    event: dict[str, Any] = {"event": "error", "code": code, "detail": public_detail(error)}
    if isinstance(error, BackfillRefusedError):
        event["reason"] = error.reason
    elif isinstance(error, BackfillStoppedError):
        event.update(reason=error.reason, fired=error.fired, remaining=error.remaining)
    return event


def _summary(summary: RangeSummary) -> dict[str, Any]:
    return {
        "name": summary.schedule,
        "count": summary.count,
        "alreadySucceeded": summary.already_succeeded,
        "fired": summary.fired,
        "succeeded": summary.succeeded,
        "failed": summary.failed,
        "reprocess": summary.reprocess.value,
        "toRun": summary.to_run,
        "kept": summary.kept,
        "taken": summary.taken,
    }


def dry_run_answer(plan: RangePlan) -> dict[str, Any]:
    """A dry run's answer: the range, and each slot with its current status and action."""
    return {
        "name": plan.schedule,
        "dryRun": True,
        "from": iso_z(plan.start),
        "to": iso_z(plan.end),
        "reprocess": plan.reprocess.value,
        "count": plan.count,
        "alreadySucceeded": plan.already_succeeded,
        "toRun": plan.to_run,
        "kept": plan.kept,
        "slots": [
            {
                "scheduledAt": iso_z(state.slot),
                "status": None if state.status is None else state.status.value,
                "action": state.action.value,
                "runId": None if state.current is None else state.current.id,
                "rows": state.rows,
            }
            for state in plan.states
        ],
    }


__all__ = [
    "BackfillRequest",
    "FireAnswer",
    "InspectRunView",
    "PauseAnswer",
    "PauseRequest",
    "RunPage",
    "ScheduleList",
    "ScheduleView",
    "router",
]
