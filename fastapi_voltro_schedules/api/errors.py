"""Domain errors → HTTP, in one place.

Route functions and dependencies raise the package's own errors
(:mod:`fastapi_voltro_schedules.errors`); :class:`VoltroRoute` turns them into responses here,
so the status code of a refusal is decided once for every route of ``schedules_router``.

Every error body is ``{"detail": <message>, "code": <kind>, ...facts}``: ``detail`` is the
human sentence (what happened and the fix), ``code`` is stable for machines.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from ..errors import (
    AuthenticationError,
    BackfillRefusedError,
    BackfillRequestError,
    BackfillStoppedError,
    ForbiddenRoleError,
    FutureArrivalError,
    InvalidArrivalTimeError,
    InvalidQueryError,
    NotExternallyTriggeredError,
    OffCadenceError,
    PayloadTooLargeError,
    RunNotFoundError,
    RunNowBusyError,
    ScheduleNotFoundError,
    SchedulePausedError,
    SchedulerDisabledError,
    SchedulerNotRunningError,
    SchedulerShuttingDownError,
    StoreUnavailableError,
    TokenNotConfiguredError,
    TooLateArrivalError,
    TriggerRefusedError,
    VoltroError,
    shown,
)

ERROR_STATUS: tuple[tuple[type[VoltroError], int, str], ...] = (
    (AuthenticationError, 401, "unauthorized"),
    (TokenNotConfiguredError, 503, "token_not_configured"),
    (ForbiddenRoleError, 403, "forbidden_role"),
    (SchedulePausedError, 409, "paused"),
    (ScheduleNotFoundError, 404, "schedule_not_found"),
    (RunNotFoundError, 404, "run_not_found"),
    (NotExternallyTriggeredError, 409, "not_external"),
    (OffCadenceError, 409, "off_cadence"),
    (FutureArrivalError, 409, "future"),
    (TooLateArrivalError, 409, "too_late"),
    (TriggerRefusedError, 409, "refused"),
    (InvalidArrivalTimeError, 400, "invalid_scheduled_at"),
    (PayloadTooLargeError, 413, "payload_too_large"),
    (BackfillRefusedError, 409, "backfill_refused"),
    (BackfillRequestError, 422, "invalid_backfill"),
    (InvalidQueryError, 422, "invalid_query"),
    (BackfillStoppedError, 409, "backfill_stopped"),
    (StoreUnavailableError, 503, "store_unavailable"),
    (RunNowBusyError, 409, "busy"),
    (SchedulerShuttingDownError, 503, "shutting_down"),
    (SchedulerNotRunningError, 503, "scheduler_not_running"),
    (SchedulerDisabledError, 503, "scheduler_disabled"),
    (VoltroError, 500, "error"),
)
"""(error class, status, code), most specific first: the first ``isinstance`` match wins."""


def status_of(error: VoltroError) -> tuple[int, str]:
    """The HTTP status and the body's ``code`` for a domain error."""
    for cls, status, code in ERROR_STATUS:
        if isinstance(error, cls):
            return status, code
    raise AssertionError("VoltroError is the last row")  # pragma: no cover


def error_response(error: VoltroError) -> JSONResponse:
    status, code = status_of(error)
    body: dict[str, Any] = {"detail": str(error), "code": code}
    headers: dict[str, str] = {}
    if isinstance(error, TriggerRefusedError):
        body.update(error.details)
    elif isinstance(error, TokenNotConfiguredError | SchedulerDisabledError):
        body["variable"] = error.variable
    elif isinstance(error, AuthenticationError):
        headers["WWW-Authenticate"] = "Bearer"
    elif isinstance(error, ForbiddenRoleError):
        body.update(required=error.required, role=error.role)
    elif isinstance(error, SchedulePausedError):
        body.update(
            name=error.name,
            pausedAt=error.paused_at,
            pausedBy=error.paused_by,
            reason=error.reason,
        )
    elif isinstance(error, BackfillRefusedError):
        body.update(
            reason=error.reason, count=error.count, alreadySucceeded=error.already_succeeded
        )
    elif isinstance(error, BackfillStoppedError):
        body.update(reason=error.reason, fired=error.fired, remaining=error.remaining)
    elif isinstance(error, RunNowBusyError):
        body["runId"] = error.run_id
    elif isinstance(error, InvalidArrivalTimeError):
        body["header"] = error.header
    elif isinstance(error, PayloadTooLargeError):
        body["limitBytes"] = error.limit
    elif isinstance(error, StoreUnavailableError | SchedulerNotRunningError):
        headers["Retry-After"] = "5"
    return JSONResponse(body, status_code=status, headers=headers or None)


MAX_BODY_BYTES = 16 * 1024
"""The largest request body any route of ``schedules_router`` reads. The only body is a range
backfill's ``{"from", "to", "confirm", "limit"}`` (under 200 bytes); anything bigger is refused
with 413 before it is held in memory — a declared ``Content-Length`` before anything else, a
chunked body as soon as it passes the cap."""


def too_large(size: int | None = None) -> PayloadTooLargeError:
    said = f" ({size:,} bytes)" if size is not None else ""
    return PayloadTooLargeError(
        f"the request body{said} is larger than the {MAX_BODY_BYTES:,} bytes these routes take "
        '— a range backfill body is {"from", "to", "confirm", "limit"}, nothing more',
        limit=MAX_BODY_BYTES,
    )


def check_declared_length(request: Request) -> None:
    """413 for a declared ``Content-Length`` above :data:`MAX_BODY_BYTES`, before anything is
    read (and before the token is checked: refusing a size reveals nothing)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > MAX_BODY_BYTES:
        raise too_large(int(declared))


async def read_body(request: Request) -> bytes:
    """The request body, read chunk by chunk and refused (413) as soon as it passes
    :data:`MAX_BODY_BYTES`, so a chunked upload without a ``Content-Length`` is never held."""
    check_declared_length(request)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise too_large()
    return bytes(body)


def validation_response(error: RequestValidationError) -> JSONResponse:
    """FastAPI's parameter validation, answered in the package's shape (``detail`` a sentence
    naming each field, ``code`` stable) and with every echoed value bounded: FastAPI's own 422
    repeats each bad input whole, a 50 MB field included."""
    problems: list[dict[str, Any]] = []
    for item in error.errors():
        loc = [part if isinstance(part, int) else shown(part, 60) for part in item.get("loc", ())]
        problem: dict[str, Any] = {
            "loc": loc,
            "msg": shown(item.get("msg", ""), 200),
            "type": item.get("type", ""),
        }
        if "input" in item:
            problem["input"] = shown(item["input"])
        problems.append(problem)
    where = "; ".join(
        f"{'.'.join(str(p) for p in problem['loc'])}: {problem['msg']}"
        + (f" (got {problem['input']})" if "input" in problem else "")
        for problem in problems[:5]
    )
    more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
    return JSONResponse(
        {"detail": f"invalid request — {where}{more}", "code": "invalid_request",
         "errors": problems[:20]},
        status_code=422,
    )  # fmt: skip


class VoltroRoute(APIRoute):
    """An ``APIRoute`` whose domain errors — from the endpoint or a dependency — become
    :func:`error_response` answers, and whose parameter validation errors become bounded
    :func:`validation_response` answers."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route_handler(request: Request) -> Response:
            try:
                check_declared_length(request)
                return await handler(request)
            except VoltroError as error:
                return error_response(error)
            except RequestValidationError as error:
                return validation_response(error)

        return route_handler


def error_responses(*errors: type[VoltroError]) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses=`` entries documenting which errors a route may answer."""
    out: dict[int | str, dict[str, Any]] = {}
    for error in errors:
        for cls, status, code in ERROR_STATUS:
            if issubclass(error, cls):
                entry = out.setdefault(status, {"description": ""})
                first = (error.__doc__ or code).strip().splitlines()[0]
                entry["description"] = "; ".join(filter(None, [entry["description"], first]))
                break
    return out
