"""Domain errors → HTTP, in one place.

Route functions and dependencies raise the package's own errors
(:mod:`fastapi_voltro_schedules.errors`); :class:`VoltroRoute` turns them into responses here,
so the status code of a refusal is decided once for every route of ``schedules_router``.

Every error body is ``{"detail": <message>, "code": <kind>, ...facts}``: ``detail`` is the
human sentence (what happened and the fix), ``code`` is stable for machines. That holds for
every refusal of these routes — FastAPI's own (a body it cannot parse) included — and no body
carries a database driver's text: a store failure is answered with a fixed sentence and logged
here, where the operator reads it (:func:`public_detail`). What a request may carry is
:mod:`.edge`.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

try:
    from fastapi.routing import iter_route_contexts
except ImportError:  # FastAPI that copies an included router's routes into the app's
    iter_route_contexts = None  # type: ignore[assignment]
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException
from starlette.routing import compile_path
from starlette.types import Receive, Scope, Send

from ..errors import (
    AuthenticationError,
    BackfillRefusedError,
    BackfillRequestError,
    BackfillStoppedError,
    DeclaredInCodeError,
    ForbiddenRoleError,
    FutureArrivalError,
    InvalidArrivalTimeError,
    InvalidQueryError,
    InvalidScheduleError,
    NotExternallyTriggeredError,
    OffCadenceError,
    PauseRequestError,
    PauseUntilPassedError,
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
from ..logs import logger
from .edge import MAX_BODY_BYTES as MAX_BODY_BYTES  # re-exported: the routes' docs quote it
from .edge import MAX_SCHEDULE_BODY_BYTES, bounded, check_declared_length
from .edge import read_body as read_body  # re-exported for the routes that read a body

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
    (PauseUntilPassedError, 409, "until_passed"),
    (PauseRequestError, 422, "invalid_pause"),
    (BackfillStoppedError, 409, "backfill_stopped"),
    (DeclaredInCodeError, 409, "declared_in_code"),
    (InvalidScheduleError, 422, "invalid_schedule"),
    (StoreUnavailableError, 503, "store_unavailable"),
    (RunNowBusyError, 409, "busy"),
    (SchedulerShuttingDownError, 503, "shutting_down"),
    (SchedulerNotRunningError, 503, "scheduler_not_running"),
    (SchedulerDisabledError, 503, "scheduler_disabled"),
    (VoltroError, 500, "error"),
)
"""(error class, status, code), most specific first: the first ``isinstance`` match wins."""

CALLERS_TO_FIX = frozenset(
    {
        "invalid_request",
        "invalid_scheduled_at",
        "payload_too_large",
        "invalid_backfill",
        "invalid_query",
        "invalid_pause",
        "invalid_schedule",
        "until_passed",
        "schedule_not_found",
        "run_not_found",
        "not_external",
        "off_cadence",
    }
)
"""The codes of refusals the caller must change the request to get past (an unknown name, a
bad field, an instant already passed) — not a state of the scheduler that passes (``busy``,
``paused``, ``store_unavailable``), nor a name the code owns (``declared_in_code``: the fix is
in the code or a deploy, docs/runtime-schedules.md). ``voltro schedule`` exits 2 on these, 1
on the others, whether it asked over HTTP or in process."""


def status_of(error: VoltroError) -> tuple[int, str]:
    """The HTTP status and the body's ``code`` for a domain error."""
    for cls, status, code in ERROR_STATUS:
        if isinstance(error, cls):
            return status, code
    raise AssertionError("VoltroError is the last row")  # pragma: no cover


STORE_UNAVAILABLE = (
    "the scheduler's database did not answer (down, unreachable or overloaded) — retry after "
    "the Retry-After seconds; GET /_voltro/health/ready says when it answers again, and the app's "
    "log (logger fastapi_voltro_schedules) holds the database's own error"
)
"""What a ``503 store_unavailable`` says, whatever the store said: the driver's text names the
database's host and port and its internals, which are the operator's to read in the log, not
every caller's."""


class ErrorResponse(JSONResponse):
    """The one error shape's response. An error body may repeat a caller's text, and JSON text
    can hold a lone surrogate (``"\\ud800"``) that UTF-8 cannot encode: it is written back as
    the same JSON escape rather than failing the answer with a 500."""

    def render(self, content: Any) -> bytes:
        text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return text.encode("utf-8", "backslashreplace")


def public_detail(error: VoltroError) -> str:
    """``detail`` for ``error``: its message, except a store failure's (logged here instead)."""
    if isinstance(error, StoreUnavailableError):
        logger.warning("schedules_router: answered 503 store_unavailable — %s", error)
        return STORE_UNAVAILABLE
    return str(error)


def error_response(error: VoltroError) -> JSONResponse:
    status, code = status_of(error)
    body: dict[str, Any] = {"detail": public_detail(error), "code": code}
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
    elif isinstance(error, InvalidScheduleError):
        body["field"] = error.field
    elif isinstance(error, DeclaredInCodeError):
        body["name"] = error.name
    elif isinstance(error, PayloadTooLargeError):
        body["limitBytes"] = error.limit
    elif isinstance(error, StoreUnavailableError | SchedulerNotRunningError):
        headers["Retry-After"] = "5"
    return ErrorResponse(body, status_code=status, headers=headers or None)


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
    return ErrorResponse(
        {"detail": f"invalid request — {where}{more}", "code": "invalid_request",
         "errors": problems[:20]},
        status_code=422,
    )  # fmt: skip


def http_error_response(error: HTTPException) -> JSONResponse:
    """FastAPI's own refusals in the package's shape. The one a route can meet is a body FastAPI
    read but could not parse (nested deeper than Python's recursion limit, or not text); it
    raises a bare 400 for it, which is ``422 invalid_request`` here, like every other bad
    body."""
    if error.status_code == 400 and error.__cause__ is not None:
        return ErrorResponse(
            {
                "detail": "invalid request — the body could not be parsed (not JSON, not UTF-8, "
                "or nested too deep) — send a JSON object as the route's schema describes",
                "code": "invalid_request",
            },
            status_code=422,
        )
    code = "invalid_request" if error.status_code < 500 else "error"
    return ErrorResponse(
        {"detail": shown(str(error.detail), 200), "code": code},
        status_code=error.status_code,
        headers=error.headers,
    )


class VoltroRoute(APIRoute):
    """An ``APIRoute`` whose requests pass :mod:`.edge` first (the body cap, before the token
    is checked), whose domain errors — from the endpoint or a dependency — become
    :func:`error_response` answers, and whose parameter validation errors and FastAPI
    refusals become bounded answers in the same shape."""

    body_limit: int = MAX_BODY_BYTES
    """The largest body this route reads (a subclass raises it for one route)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        limit = self.body_limit

        async def route_handler(request: Request) -> Response:
            try:
                check_declared_length(request, limit)
                return await handler(bounded(request, limit))
            except VoltroError as error:
                return error_response(error)
            except RequestValidationError as error:
                return validation_response(error)
            except HTTPException as error:
                # FastAPI turns whatever its body parsing raised into a 400 — the 413 of
                # edge.bounded included: the cause is the answer then.
                if isinstance(error.__cause__, VoltroError):
                    return error_response(error.__cause__)
                return http_error_response(error)

        return route_handler

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A method the path does not take: ``405`` naming every method of the path. Starlette
        answers with the first route of the path only (``Allow: GET`` where ``PUT`` and
        ``DELETE`` of the same path sit in another router) — a client, or a generator reading
        ``Allow``, would conclude the others do not exist. A path another route names literally
        (``…/schedules/runs``) is that route's alone, though this route's template matches it:
        ``PUT …/schedules/runs`` is not a schedule named ``runs``."""
        allowed_here = not self.methods or scope["method"] in self.methods
        if allowed_here and "{" not in self.path_format:
            await super().handle(scope, receive, send)  # the common case: no scan
            return
        literal, templated = _methods_of_path(scope)
        if (literal and "{" in self.path_format) or not allowed_here:
            allowed = sorted(literal or templated or self.methods or ())
            response = ErrorResponse(
                {
                    "detail": f"{shown(scope['method'], 20)} is not a method of this path — "
                    f"use {', '.join(allowed)}",
                    "code": "method_not_allowed",
                },
                status_code=405,
                headers={"Allow": ", ".join(allowed)},
            )
            await response(scope, receive, send)
            return
        await super().handle(scope, receive, send)


@functools.cache
def _compiled(template: str) -> re.Pattern[str]:
    return compile_path(template)[0]


def _methods_of_path(scope: Scope) -> tuple[set[str], set[str]]:
    """The methods the app's routes take at the request's path: those of routes that name it
    literally, and those of routes whose template matches it."""
    router = scope.get("router")
    routes: Iterable[Any] = getattr(router, "routes", ())
    if iter_route_contexts is not None:  # FastAPI that keeps included routers whole
        routes = iter_route_contexts(list(routes))
    path = scope.get("path", "")
    root = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    literal: set[str] = set()
    templated: set[str] = set()
    for route in routes:
        template, taken = getattr(route, "path_format", None), getattr(route, "methods", None)
        if template and taken and _compiled(template).match(path):
            (templated if "{" in template else literal).update(taken)
    return literal, templated


class ErrorBody(BaseModel):
    """Every refusal of these routes: ``detail`` the sentence (what happened and the fix),
    ``code`` stable for machines, and the facts of some codes beside them (``variable``,
    ``field``, ``runId``, ``limitBytes``, ``errors``…)."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"additionalProperties": True})

    detail: str = Field(description="What happened and the fix, for people.")
    code: str = Field(description="Stable, for machines: e.g. unauthorized, forbidden_role, "
                      "schedule_not_found, invalid_request, store_unavailable.")  # fmt: skip


VALIDATION_DESCRIPTION = (
    "invalid_request: a parameter, header or body the route refuses (`errors` names each field)"
)


def error_responses(
    *errors: type[VoltroError], validation: bool = True
) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses=`` entries documenting which errors a route may answer, each with
    the :class:`ErrorBody` schema. ``validation``: the route takes parameters or a body, so
    FastAPI's own refusal (``422 invalid_request``, in the same shape) is documented too."""
    out: dict[int | str, dict[str, Any]] = {}
    if validation:
        out[422] = {"model": ErrorBody, "description": VALIDATION_DESCRIPTION}
    for error in errors:
        for cls, status, code in ERROR_STATUS:
            if issubclass(error, cls):
                entry = out.setdefault(status, {"model": ErrorBody, "description": ""})
                first = (error.__doc__ or code).strip().splitlines()[0]
                line = f"{code}: {first}"
                if line not in entry["description"]:
                    entry["description"] = "; ".join(filter(None, [entry["description"], line]))
                break
    return out


class ScheduleBodyRoute(VoltroRoute):
    """The route that writes a run-time schedule: its body may carry up to 16 KiB of args."""

    body_limit = MAX_SCHEDULE_BODY_BYTES
