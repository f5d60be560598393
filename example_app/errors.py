"""The example app's refusals, in the package's one error shape.

Its routes answer like ``schedules_router``'s: every refusal is ``{"detail", "code"}``
(:class:`~fastapi_voltro_schedules.api.errors.ErrorBody`), FastAPI's own refusals included (a
body it cannot parse is ``422 invalid_request``, not a bare undocumented ``400``), and a method
a path does not take is a ``405`` whose ``Allow`` names every route of the path — the
package's :class:`~fastapi_voltro_schedules.api.errors.VoltroRoute` does all three, so the
app's routers take it as their ``route_class`` rather than copy it. What is the app's own: its
domain refusals (:class:`AppError`), raised by a route and answered here with their ``code``.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response

from fastapi_voltro_schedules.api.errors import (
    VALIDATION_DESCRIPTION,
    ErrorBody,
    ErrorResponse,
    VoltroRoute,
)

__all__ = ["AppError", "AppRoute", "refusals"]


class AppError(Exception):
    """A refusal of the app's own: ``status``, a stable ``code`` and the ``detail`` sentence
    (what happened and the fix)."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail


class AppRoute(VoltroRoute):
    """``VoltroRoute`` (the error shape, the parsed-body refusal, ``Allow``) that also answers
    an :class:`AppError` in that shape."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route_handler(request: Request) -> Response:
            try:
                return await handler(request)
            except AppError as error:
                return ErrorResponse(
                    {"detail": error.detail, "code": error.code}, status_code=error.status
                )

        return route_handler


def refusals(validation: bool = True, **codes: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route of the app: each ``code=status`` it may answer, and (for a
    route with parameters or a body) ``422 invalid_request``, all with the error body's schema
    — a client generated from the OpenAPI reads them, and the contract test holds the server
    to them."""
    out: dict[int | str, dict[str, Any]] = {}
    if validation:
        out[422] = {"model": ErrorBody, "description": VALIDATION_DESCRIPTION}
    for code, status in codes.items():
        entry = out.setdefault(status, {"model": ErrorBody, "description": ""})
        entry["description"] = "; ".join(filter(None, [entry["description"], code]))
    return out
