"""Writing run-time schedules over HTTP (operator token): ``PUT`` and ``DELETE
/_voltro/inspect/schedules/{name}``.

The routes parse, call :meth:`Scheduling.put_schedule` / :meth:`Scheduling.delete_schedule`,
and answer the schedule as the listing shows it. Refusals are the domain's, mapped in
:mod:`.errors`: a bad field ``422 invalid_schedule`` with ``field`` (the body's key), a name
declared in code ``409 declared_in_code``, an unknown name on ``DELETE`` ``404``, the read-only
role ``403``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response
from pydantic import WithJsonSchema
from pydantic.alias_generators import to_camel

from ..errors import (
    DeclaredInCodeError,
    InvalidScheduleError,
    PayloadTooLargeError,
    ScheduleNotFoundError,
    StoreUnavailableError,
    shown,
)
from .auth import OPERATOR_ERRORS, InspectAuth, OperatorRole, engine_of, scheduling_of
from .edge import MAX_SCHEDULE_BODY_BYTES
from .errors import ScheduleBodyRoute, error_responses, read_body
from .inspect import INSPECT_PREFIX, schedule_view
from .inspect_models import (
    MAX_EXCLUDE_ITEMS,
    NAME_PATTERN,
    PutScheduleRequest,
    ScheduleView,
    put_schedule_request,
)
from .router import PUT_SCHEDULE

__all__ = ["router"]

# ScheduleBodyRoute: the PUT's body may carry up to 16 KiB of args (the DELETE reads none)
router = APIRouter(route_class=ScheduleBodyRoute, dependencies=[InspectAuth])


@router.put(
    f"{INSPECT_PREFIX}/{{name}}",
    operation_id=PUT_SCHEDULE,
    summary="Create or replace a run-time schedule (201 created, 200 replaced)",
    description="Every replica runs it within one heartbeat, the answering one at once. An "
    "edit is a new definition version effective now: no slot its previous version ran is run "
    "again, and none of the new cadence from before the edit is owed. The body is at most "
    f"{MAX_SCHEDULE_BODY_BYTES:,} bytes; its args at most 16 KiB of JSON.",
    response_model=ScheduleView,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": PutScheduleRequest.model_json_schema(by_alias=True)}
            },
        }
    },
    responses={
        201: {"description": "Created", "model": ScheduleView},
        **error_responses(
            InvalidScheduleError,
            DeclaredInCodeError,
            PayloadTooLargeError,
            StoreUnavailableError,
            *OPERATOR_ERRORS,
        ),
    },
)
async def put_schedule(
    name: Annotated[
        str,
        Path(description="1–200 letters, digits, _ - . or :, starting with a letter or digit."),
        # The pattern is published, and checked by put_schedule (which names the field): a
        # look-ahead is beyond pydantic's own regex engine.
        WithJsonSchema({"type": "string", "pattern": NAME_PATTERN}),
    ],
    request: Request,
    response: Response,
    role: OperatorRole,
) -> ScheduleView:
    scheduling = scheduling_of(request)
    engine_of(scheduling)  # 503 when stopped or switched off
    body = put_schedule_request(await read_body(request, MAX_SCHEDULE_BODY_BYTES))
    try:
        result = await scheduling.put_schedule(
            name,
            cron=body.cron,
            timezone=body.timezone,
            handler=body.handler,
            args=body.args,
            on_overlap=body.on_overlap,
            backfill=body.backfill,
            max_runtime_ms=body.max_runtime_ms,
            retry=body.retry,
            exclude=_exclude_items(body.exclude),
            record=body.record,
            by=role.value,
        )
    except InvalidScheduleError as error:  # the field as the body spells it
        field = ".".join(to_camel(part) for part in error.field.split("."))
        raise InvalidScheduleError(str(error), field=field) from None
    response.status_code = 201 if result.created else 200
    return schedule_view(
        scheduling,
        result.schedule,
        await scheduling.running_store().latest([name]),
        await scheduling.current_pauses(),
        scheduling.clock.now(),
    )


def _exclude_items(value: object) -> object:
    """The body's ``exclude``: a list (a bare object or string is refused, naming the field,
    by ``put_schedule`` — over the wire ``exclude`` is always a list)."""
    if isinstance(value, list) and len(value) > MAX_EXCLUDE_ITEMS:
        raise InvalidScheduleError(
            f"invalid schedule — exclude: {len(value):,} items is over the limit of "
            f"{MAX_EXCLUDE_ITEMS:,} — name holidays with a calendar "
            '({"country": "DE"}) rather than day by day',
            field="exclude",
        )
    if value is None or isinstance(value, list):
        return value
    raise InvalidScheduleError(
        f"invalid schedule — exclude: {shown(value, 60)} is not a list — send "
        '["2026-12-24", {"country": "DE", "subdiv": "BY"}]',
        field="exclude",
    )


@router.delete(
    f"{INSPECT_PREFIX}/{{name}}",
    status_code=204,
    response_class=Response,
    operation_id="deleteSchedule",
    summary="Delete a run-time schedule on every replica",
    description="Nothing new fires (a firing in flight finishes); its ledger rows stay. A "
    "declared schedule answers 409 declared_in_code; an unknown name 404.",
    responses=error_responses(
        ScheduleNotFoundError,
        DeclaredInCodeError,
        PayloadTooLargeError,
        StoreUnavailableError,
        *OPERATOR_ERRORS,
    ),
)
async def delete_schedule(name: str, request: Request, role: OperatorRole) -> Response:
    scheduling = scheduling_of(request)
    engine_of(scheduling)
    await scheduling.delete_schedule(name, by=role.value)
    return Response(status_code=204)
