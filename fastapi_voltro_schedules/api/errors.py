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
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from ..errors import (
    AuthenticationError,
    BackfillRefusedError,
    BackfillRequestError,
    FutureArrivalError,
    InvalidArrivalTimeError,
    NotExternallyTriggeredError,
    OffCadenceError,
    RunNotFoundError,
    ScheduleNotFoundError,
    SchedulerDisabledError,
    SchedulerNotRunningError,
    StoreUnavailableError,
    TokenNotConfiguredError,
    TriggerRefusedError,
    VoltroError,
)

ERROR_STATUS: tuple[tuple[type[VoltroError], int, str], ...] = (
    (AuthenticationError, 401, "unauthorized"),
    (TokenNotConfiguredError, 503, "token_not_configured"),
    (ScheduleNotFoundError, 404, "schedule_not_found"),
    (RunNotFoundError, 404, "run_not_found"),
    (NotExternallyTriggeredError, 409, "not_external"),
    (OffCadenceError, 409, "off_cadence"),
    (FutureArrivalError, 409, "future"),
    (TriggerRefusedError, 409, "refused"),
    (InvalidArrivalTimeError, 400, "invalid_scheduled_at"),
    (BackfillRefusedError, 409, "backfill_refused"),
    (BackfillRequestError, 422, "invalid_backfill"),
    (StoreUnavailableError, 503, "store_unavailable"),
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
    elif isinstance(error, BackfillRefusedError):
        body.update(
            reason=error.reason, count=error.count, alreadySucceeded=error.already_succeeded
        )
    elif isinstance(error, InvalidArrivalTimeError):
        body["header"] = error.header
    elif isinstance(error, StoreUnavailableError | SchedulerNotRunningError):
        headers["Retry-After"] = "5"
    return JSONResponse(body, status_code=status, headers=headers or None)


class VoltroRoute(APIRoute):
    """An ``APIRoute`` whose domain errors — from the endpoint or a dependency — become
    :func:`error_response` answers."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route_handler(request: Request) -> Response:
            try:
                return await handler(request)
            except VoltroError as error:
                return error_response(error)

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
